"""Factories for service tests: a tiny benchmark definition, uploads, and submissions driven
through the real pipeline functions (records written with certbench.smoothing.records, metrics
computed by
certbench.smoothing.metrics), so leaderboard rows come from the same code path as in production."""

from __future__ import annotations

import io
import json
from typing import Any

from sqlalchemy.orm import Session

from certbench.nets.architectures import build_classifier
from certbench.nets.loading import save_weights
from certbench.pd.evaluation import RobustnessRecord, RobustnessReport
from certbench.smoothing.core import CertifyRecord
from certbench.smoothing.records import write_records
from models.catalog.benchmarks import parse_definition, upsert_benchmark
from models.core.settings import Settings
from models.db.accounts import create_token, create_user
from models.db.entities import Benchmark, Role, RunSeed, User
from models.db.states import SubmissionState
from models.runs import shards
from models.runs.results import complete_submission
from models.stages.base import ShardSpec
from models.submissions import lifecycle as pipeline
from models.submissions import storage
from models.submissions.intake import Upload, create_submission

S = SubmissionState


def tiny_definition(name: str = "tiny", *, version: int = 1, sets: int = 2, size: int = 6) -> dict:
    """Two small test sets (bands low/high), 3 images each after skip=2."""
    return {
        "format": "certbench-benchmark/1",
        "name": name,
        "version": version,
        "title": f"Tiny {name}",
        "base_dataset": "cifar10",
        "num_classes": 10,
        "sigmas": [0.25, 0.5],
        "protocol": {"version": "test-v1", "n0": 4, "n": 16, "alpha": 0.001, "skip": 2},
        "bands": {"low": ["fog"], "high": ["noise"]},
        "test_sets": [
            {
                "name": f"set{i}",
                "repo": f"certbench/{name}",
                "config": f"set{i}",
                "source_size": size,
                "band": "low" if i % 2 == 0 else "high",
                "attributes": {"corruption": "fog" if i % 2 == 0 else "noise"},
            }
            for i in range(sets)
        ],
    }


def load_tiny(session: Session, **kwargs: Any) -> Benchmark:
    definition = parse_definition(json.dumps(tiny_definition(**kwargs)))
    return upsert_benchmark(session, definition)


def make_user(session: Session, name: str, role: Role = Role.SUBMITTER) -> tuple[User, str]:
    user = create_user(session, name=name, role=role)
    return user, create_token(session, user=user).secret


def manifest(
    *, benchmark: str = "tiny", sigma: float = 0.25, name: str = "model", classes: int = 10
) -> dict[str, Any]:
    return {
        "benchmark": benchmark,
        "architecture": {"name": "cifar_resnet20", "kwargs": {}},
        "num_classes": classes,
        "preprocessing": {"mean": [0.4914, 0.4822, 0.4465], "std": [0.2470, 0.2435, 0.2616]},
        "smoothing": {"sigma": sigma},
        "metadata": {
            "name": name,
            "authors": ["A. Author"],
            "paper_url": "https://example.org/paper",
            "code_url": None,
            "licence": "MIT",
        },
    }


_WEIGHTS: dict[int, bytes] = {}


def weights_bytes(seed: int = 0) -> bytes:
    """Real safetensors weights of a cifar_resnet20 (cached per seed: building is slowish)."""
    if seed not in _WEIGHTS:
        import tempfile
        from pathlib import Path

        import torch

        torch.manual_seed(seed)
        model = build_classifier(
            "cifar_resnet20",
            num_classes=10,
            mean=(0.4914, 0.4822, 0.4465),
            std=(0.2470, 0.2435, 0.2616),
        )
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "w.safetensors"
            save_weights(model, path)
            _WEIGHTS[seed] = path.read_bytes()
    return _WEIGHTS[seed]


def upload(
    *, seed: int = 0, name: str = "model", sigma: float = 0.25, private: bool = False, **kw: Any
) -> Upload:
    """An Upload as the API builds it (weights need not be a real model for ORM tests)."""
    return Upload(
        weights=f"weights-{seed}".encode() * 8,
        manifest=manifest(name=name, sigma=sigma),
        model_name=name,
        architecture="cifar_resnet20",
        sigma=sigma,
        is_private=private,
        **kw,
    )


def records_for(start: int, stop: int, *, quality: float, skip: int = 2) -> list[CertifyRecord]:
    """Deterministic records: images certified correctly when (index % 3) < 3·quality."""
    out = []
    for position in range(start, stop):
        correct = (position % 3) < round(3 * quality)
        n_y = 15 if correct else 3
        out.append(
            CertifyRecord(
                index=position * skip,
                label=position % 10,
                prediction=position % 10 if correct else -1,
                radius=0.25 + 0.5 * quality if correct else 0.0,
                pa_lower=0.8 if correct else 0.2,
                selected=position % 10,
                n_a=n_y,
                n_y=n_y,
                n=16,
                n0=4,
                correct=correct,
                seconds=0.01,
                sigma=0.25,
                alpha=0.001,
            )
        )
    return out


def run_pipeline(
    session: Session, submission_id: int, *, settings: Settings, quality: float = 0.5
) -> None:
    """Drive a submission through validate → queue → shards → aggregate, as a worker does."""
    assert pipeline.transition(
        session, submission_id, from_states={S.SUBMITTED}, to_state=S.VALIDATING, settings=settings
    )
    assert pipeline.transition(
        session, submission_id, from_states={S.VALIDATING}, to_state=S.QUEUED
    )
    assert pipeline.transition(
        session, submission_id, from_states={S.QUEUED}, to_state=S.RUNNING, settings=settings
    )
    for spec in shards.plan(session, submission_id, settings=settings, stage="certification"):
        record_shard(session, submission_id, spec, settings=settings, quality=quality)
    assert complete_submission(session, submission_id, settings=settings)


def seed_metadata(session: Session, submission_id: int) -> dict[str, str]:
    """What a worker writes into every shard file of a run: its seed's commitment, never the
    seed (the merge refuses a shard naming another commitment)."""
    return {"seed_commitment": session.get(RunSeed, submission_id).commitment}


def record_shard(
    session: Session,
    submission_id: int,
    spec: ShardSpec,
    *,
    settings: Settings,
    quality: float = 0.5,
) -> bool:
    relpath = shards.records_relpath(submission_id, spec)
    write_records(
        records_for(spec.start, spec.stop, quality=quality),
        storage.resolve(settings.artifacts_dir, relpath),
        metadata=seed_metadata(session, submission_id),
    )
    return shards.record(
        session,
        submission_id=submission_id,
        spec=spec,
        count=spec.stop - spec.start,
        seconds=0.5,
        records_path=relpath,
        worker="test",
        settings=settings,
    )


#: How many attacked images (by position in the shard plan) are clean-correct, and per ε (units of
#: 1/255) how many survive ℓ∞ APGD, ℓ∞ APGD + lazy PD projection, and PD-aware APGD.
RobustnessPlan = tuple[int, dict[int, tuple[int, int, int]]]


def robustness_report(
    start: int, stop: int, plan: RobustnessPlan, *, skip: int = 2
) -> RobustnessReport:
    """Per-image attack records as ``certbench.pd.evaluation.robust_accuracy`` writes them; a
    broken image's d_PD is 0.1·(position + 1) and its arg-max anchor its position."""
    clean, per_eps = plan
    records = []
    for eps, (linf, projected, aware) in per_eps.items():
        for position in range(start, stop):
            label = position % 10
            correct = position < clean
            linf_robust = correct and position < linf
            broken = correct and not linf_robust
            records.append(
                RobustnessRecord(
                    index=position * skip,
                    label=label,
                    eps=eps / 255,
                    clean_prediction=label if correct else (label + 1) % 10,
                    clean_correct=correct,
                    linf_robust=linf_robust,
                    pd_robust=correct and position < projected and position < aware,
                    pd_robust_projected=correct and position < projected,
                    pd_robust_aware=correct and position < aware,
                    linf_pd_threat=0.1 * (position + 1) if broken else None,
                    linf_pd_anchor=position if broken else -1,
                )
            )
    return RobustnessReport(records)


def record_robustness_shard(
    session: Session,
    submission_id: int,
    spec: ShardSpec,
    plan: RobustnessPlan,
    *,
    settings: Settings,
    anchors_sha256: str,
    seconds: float = 1.5,
) -> bool:
    """Write a robustness shard's records (as a worker does) and record the shard."""
    relpath = shards.records_relpath(submission_id, spec)
    robustness_report(spec.start, spec.stop, plan).write(
        storage.resolve(settings.artifacts_dir, relpath),
        metadata={
            "submission_id": str(submission_id),
            "anchors_sha256": anchors_sha256,
            **seed_metadata(session, submission_id),
        },
    )
    return shards.record(
        session,
        submission_id=submission_id,
        spec=spec,
        count=spec.stop - spec.start,
        seconds=seconds,
        records_path=relpath,
        worker="test",
        settings=settings,
    )


def finished_submission(
    session: Session,
    *,
    user: User,
    benchmark: Benchmark,
    settings: Settings,
    seed: int,
    quality: float = 0.5,
    **kw: Any,
) -> int:
    submission = create_submission(
        session, user=user, benchmark=benchmark, upload=upload(seed=seed, **kw), settings=settings
    )
    run_pipeline(session, submission.id, settings=settings, quality=quality)
    return submission.id


def multipart(weights: bytes, manifest_doc: dict | bytes, **form: Any) -> dict[str, Any]:
    """httpx multipart arguments for POST /api/v1/submissions."""
    body = manifest_doc if isinstance(manifest_doc, bytes) else json.dumps(manifest_doc).encode()
    return {
        "files": {
            "weights": ("model.safetensors", io.BytesIO(weights), "application/octet-stream"),
            "manifest": ("manifest.json", io.BytesIO(body), "application/json"),
        },
        "data": {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in form.items()},
    }
