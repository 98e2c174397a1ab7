"""Tiny service fixtures shared by the worker tests and the end-to-end tests.

A benchmark of two test sets of a few images in the Hub layout (written with the data helper's
``write_hub_folder``), a randomly initialised ``cifar_resnet20``, its manifest, and submissions
created through the service's intake (``models.submissions.intake``) for tests that skip the HTTP
API. Everything is sized for seconds of CPU: 2 images per test set, n0=4, n=16.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sqlalchemy import select
from sqlalchemy.orm import Session
from torch import nn

from certbench.nets.architectures import build_classifier
from certbench.nets.loading import save_weights
from models.catalog.benchmarks import get_benchmark, parse_definition, upsert_benchmark
from models.core.settings import Settings
from models.db.accounts import create_user
from models.db.entities import Benchmark, Submission, User
from models.db.states import SubmissionState
from models.submissions import intake as submission_intake
from models.submissions import lifecycle as pipeline
from models.submissions import run_seeds
from models.submissions.intake import Upload
from tests.support.data_layouts import CIFAR10_CLASSES, write_hub_folder

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
TEST_SETS = ("clean", "shifted")
SOURCE_SIZE = 4
SKIP = 2
"""Every 2nd of 4 source images: 2 images per test set, at global indices 0 and 2."""


def write_tiny_dataset(root: Path, *, seed: int = 0) -> Path:
    """A Hub-layout folder with one config per test set, SOURCE_SIZE random images each."""
    rng = np.random.default_rng(seed)
    for k, config in enumerate(TEST_SETS):
        images = rng.integers(0, 256, size=(SOURCE_SIZE, 3, 32, 32), dtype=np.uint8)
        if k:
            images = np.clip(images.astype(np.int16) + 40, 0, 255).astype(np.uint8)
        labels = rng.integers(0, 10, size=SOURCE_SIZE)
        write_hub_folder(root, config, images, labels, class_names=CIFAR10_CLASSES)
    return root


TRAIN_SIZE = 30
"""Training images of the tiny dataset: 3 per class, the anchors' source."""


def write_tiny_train_split(root: Path, *, seed: int = 1) -> Path:
    """Add a ``train`` split to the ``clean`` config of ``write_tiny_dataset``'s folder."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(TRAIN_SIZE, 3, 32, 32), dtype=np.uint8)
    labels = np.arange(TRAIN_SIZE) % 10
    write_hub_folder(root, TEST_SETS[0], images, labels, class_names=CIFAR10_CLASSES, split="train")
    return root


def tiny_robustness(dataset: Path, **changes: Any) -> dict[str, Any]:
    """A robustness stage over the tiny ``clean`` config: 2 images, 2 anchors per class, 3 steps."""
    stage: dict[str, Any] = {
        "repo": "local/tiny",
        "folder": str(dataset),
        "config": TEST_SETS[0],
        "source_size": SOURCE_SIZE,
        "anchors": "tiny_k2_s0.safetensors",
        "k": 2,
        "anchor_seed": 0,
        "eps": [8, 16],
        "n_iter": 3,
        "n_target_classes": 1,
    }
    stage.update(changes)
    return stage


def tiny_definition(
    dataset: Path,
    *,
    name: str = "tiny",
    n0: int = 4,
    n: int = 16,
    seed: int = 7,
    robustness: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A benchmark definition over ``write_tiny_dataset``'s folder (``robustness``: its stage,
    e.g. ``tiny_robustness(dataset)`` after ``write_tiny_train_split(dataset)``)."""
    extra = {} if robustness is None else {"robustness": robustness}
    return {
        **extra,
        "format": "certbench-benchmark/1",
        "name": name,
        "version": 1,
        "title": "Tiny test benchmark",
        "base_dataset": "cifar10",
        "num_classes": 10,
        "sigmas": [0.25, 0.5],
        "protocol": {
            "version": "test-v1",
            "n0": n0,
            "n": n,
            "alpha": 0.001,
            "seed": seed,
            "skip": SKIP,
        },
        "bands": {"low": ["clean"], "high": ["shifted"]},
        "test_sets": [
            {
                "name": ts,
                "repo": "local/tiny",
                "folder": str(dataset),
                "config": ts,
                "source_size": SOURCE_SIZE,
                "band": band,
            }
            for ts, band in zip(TEST_SETS, ("low", "high"), strict=True)
        ],
    }


def load_benchmark(session: Session, definition: dict[str, Any]) -> Benchmark:
    """Upsert a definition dict the way ``certbench benchmarks load`` would."""
    return upsert_benchmark(session, parse_definition(json.dumps(definition)))


def tiny_model(seed: int = 0) -> nn.Module:
    """A randomly initialised CIFAR ResNet-20 (NormalizeLayer first), deterministic per seed."""
    torch.manual_seed(seed)
    return build_classifier("cifar_resnet20", num_classes=10, mean=CIFAR_MEAN, std=CIFAR_STD)


def overflowing_model() -> nn.Module:
    """A model whose weights are all finite but whose logits are infinite for every input (the
    last layer's weights and bias are 3e38, near float32's largest number): validation's
    ``non_finite_output``, not ``non_finite_weights``."""
    model = tiny_model()
    last = [m for m in model.modules() if isinstance(m, nn.Linear)][-1]
    with torch.no_grad():
        last.weight.fill_(3e38)
        last.bias.fill_(3e38)
    return model


def non_finite_model(value: float) -> nn.Module:
    """A model whose every floating weight is ``value`` (NaN or ±inf), as a diverged training
    run leaves it: validation's ``non_finite_weights``."""
    model = tiny_model()
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.fill_(value)
    return model


def manifest(benchmark: str = "tiny", sigma: float = 0.25, **changes: Any) -> dict[str, Any]:
    """A valid manifest for ``tiny_model``; keyword arguments replace top-level fields."""
    document: dict[str, Any] = {
        "benchmark": benchmark,
        "architecture": {"name": "cifar_resnet20", "kwargs": {}},
        "num_classes": 10,
        "preprocessing": {"mean": list(CIFAR_MEAN), "std": list(CIFAR_STD)},
        "smoothing": {"sigma": sigma},
        "metadata": {"name": "tiny resnet20", "authors": ["certbench tests"]},
    }
    document.update(changes)
    return document


def weights_bytes(model: nn.Module, folder: Path, name: str = "model.safetensors") -> bytes:
    """The safetensors bytes of ``model`` (written with certbench's own save_weights)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    save_weights(model, path)
    return path.read_bytes()


def create_submission(
    session: Session,
    settings: Settings,
    *,
    weights: bytes,
    manifest_doc: dict[str, Any],
    benchmark: str = "tiny",
    user: str = "alice",
) -> int:
    """Store the upload of a ``submitted`` submission through the service's own intake."""
    owner = session.scalar(select(User).where(User.name == user)) or create_user(session, name=user)
    upload = Upload(
        weights=weights,
        manifest=manifest_doc,
        model_name=manifest_doc["metadata"]["name"],
        architecture=manifest_doc["architecture"]["name"],
        sigma=manifest_doc["smoothing"]["sigma"],
    )
    submission = submission_intake.create_submission(
        session,
        user=owner,
        benchmark=get_benchmark(session, benchmark),
        upload=upload,
        settings=settings,
    )
    return submission.id


def revealed_seed(session: Session, submission_id: int) -> int:
    """The run seed the service revealed for an ended submission
    (``models.submissions.run_seeds``)."""
    view = run_seeds.view(session, session.get(Submission, submission_id))
    if view is None or view.value is None:
        raise AssertionError(f"submission {submission_id} has no revealed seed: {view}")
    assert run_seeds.commitment(view.value) == view.commitment
    return run_seeds.parse(view.value)


class CancelOnFirstForward(nn.Module):
    """The submission's model, which cancels the submission the first time it runs (as a user
    pressing Cancel while a shard computes)."""

    def __init__(self, model: nn.Module, settings: Settings, sid: int) -> None:
        super().__init__()
        self.model, self.settings, self.sid, self.calls = model, settings, sid, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from models.db.engine import session_scope

        self.calls += 1
        if self.calls == 1:
            with session_scope(self.settings) as db:
                assert pipeline.transition(
                    db, self.sid, from_states={SubmissionState.RUNNING},
                    to_state=SubmissionState.CANCELLED, reason="cancelled_by_user",
                    message="cancelled by alice",
                )  # fmt: skip
        return self.model(x)
