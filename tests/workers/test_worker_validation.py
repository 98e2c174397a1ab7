"""validate_model: every way a stored upload can be unusable maps to its Reason code."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from torch import nn

from certbench.nets.loading import load_manifest, save_weights
from models.db.states import Reason, SubmissionState
from models.stages.work import WorkItem
from tests.support.odd_weights import with_duplicate
from tests.support.workers import manifest, non_finite_model, overflowing_model, tiny_model
from workers.validation import _check_noisy_batch, validate_model


def _item(weights: Path, document: dict, *, num_classes: int = 10, sigma: float = 0.25) -> WorkItem:
    return WorkItem(
        submission_id=1,
        state=SubmissionState.VALIDATING,
        attempt=0,
        benchmark="tiny",
        num_classes=num_classes,
        sigma=sigma,
        n0=4,
        n=16,
        alpha=0.001,
        seed=7,
        protocol_version="test-v1",
        manifest=document,
        weights_path=weights,
        test_sets=(),
    )


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("weights") / "good.safetensors"
    save_weights(tiny_model(), path)
    return path


def test_a_good_model_passes(good):
    assert validate_model(_item(good, manifest()), device="cpu") is None


@pytest.mark.parametrize(
    ("document", "reason", "words"),
    [
        (manifest(architecture={"name": "resnet9000", "kwargs": {}}),
         Reason.UNKNOWN_ARCHITECTURE, "resnet9000"),
        (manifest(architecture={"name": "cifar_resnet56", "kwargs": {}}),
         Reason.STATE_DICT_MISMATCH, "missing keys"),
        (manifest(num_classes=100), Reason.BENCHMARK_MISMATCH, "num_classes=100"),
        ({"benchmark": "tiny"}, Reason.BAD_MANIFEST, "architecture"),
        (manifest(input_size=[3, 2, 2]), Reason.INPUT_SIZE, "input_size"),
    ],
)  # fmt: skip
def test_manifest_problems_map_to_their_reason(good, document, reason, words):
    rejection = validate_model(_item(good, document), device="cpu")
    assert rejection is not None and rejection.reason == reason
    assert words in rejection.message


def test_weights_that_are_not_safetensors_are_rejected(tmp_path):
    pickled = tmp_path / "model.safetensors"
    pickled.write_bytes(pickle.dumps({"w": [1.0, 2.0]}))
    rejection = validate_model(_item(pickled, manifest()), device="cpu")
    assert rejection is not None and rejection.reason == Reason.NOT_SAFETENSORS
    assert "pickle" in rejection.message


def test_non_finite_outputs_of_finite_weights_are_rejected(tmp_path):
    path = tmp_path / "overflow.safetensors"
    save_weights(overflowing_model(), path)
    rejection = validate_model(_item(path, manifest()), device="cpu")
    assert rejection is not None and rejection.reason == Reason.NON_FINITE_OUTPUT


@pytest.mark.parametrize(
    ("value", "words"),
    [(float("nan"), "432 NaN of 432 values"), (float("inf"), "432 ±inf of 432 values"),
     (float("-inf"), "432 ±inf of 432 values")],
)  # fmt: skip
def test_nan_or_infinite_weights_are_rejected_naming_the_tensors(tmp_path, value, words):
    """Issue 35 §4: all-NaN and all-inf weights have their own reason, which names the tensors
    (the header alone cannot tell: intake accepts them, 202, and validation reads the values)."""
    path = tmp_path / "non-finite.safetensors"
    save_weights(non_finite_model(value), path)
    rejection = validate_model(_item(path, manifest()), device="cpu")
    assert rejection is not None and rejection.reason == Reason.NON_FINITE_WEIGHTS
    assert f"1.conv1.weight ({words})" in rejection.message
    assert "(+" in rejection.message  # every floating tensor counts; the first few are named


def test_one_nan_weight_is_enough(tmp_path):
    model = tiny_model()
    with torch.no_grad():
        model.state_dict()["1.fc.weight"][3, 5] = float("nan")
    path = tmp_path / "one-nan.safetensors"
    save_weights(model, path)
    rejection = validate_model(_item(path, manifest()), device="cpu")
    assert rejection is not None and rejection.reason == Reason.NON_FINITE_WEIGHTS
    assert rejection.message.startswith(
        "weights hold values that are not finite: 1.fc.weight (1 NaN of 640 values)"
    )


def test_a_stored_header_naming_a_tensor_twice_is_rejected(good, tmp_path):
    """A file stored before intake checked names (or by a path that skipped intake)."""
    path = tmp_path / "twice.safetensors"
    path.write_bytes(with_duplicate(good.read_bytes(), other_offsets=True))
    rejection = validate_model(_item(path, manifest()), device="cpu")
    assert rejection is not None and rejection.reason == Reason.DUPLICATE_TENSOR
    assert "twice" in rejection.message


def test_a_stored_std_float32_cannot_divide_by_is_rejected(good):
    document = manifest(preprocessing={"mean": [0.5] * 3, "std": [1e-300] * 3})
    rejection = validate_model(_item(good, document), device="cpu")
    assert rejection is not None and rejection.reason == Reason.BAD_PREPROCESSING
    assert "float32" in rejection.message


class _FragileOutsideUnitCube(nn.Module):
    """Fine on images in [0, 1]; NaN as soon as an input leaves it (as noisy inputs do)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = x.flatten(1)[:, :10].clone()
        outside = ((x < 0) | (x > 1)).flatten(1).any(dim=1)
        logits[outside] = float("nan")
        return logits


def test_outputs_that_break_only_under_noise_are_rejected(tmp_path):
    model = _FragileOutsideUnitCube()
    document = load_manifest(manifest())
    assert torch.isfinite(model(torch.rand(4, 3, 32, 32))).all()
    rejection = _check_noisy_batch(
        model, _item(tmp_path / "unused", manifest()), document, device=torch.device("cpu")
    )
    assert rejection is not None and rejection.reason == Reason.NON_FINITE_OUTPUT
    assert "noisy inputs" in rejection.message and "sigma=0.25" in rejection.message


def test_wrong_output_width_on_the_noisy_batch_is_rejected(tmp_path):
    document = load_manifest(manifest())
    rejection = _check_noisy_batch(
        _FragileOutsideUnitCube(),
        _item(tmp_path / "unused", manifest(), num_classes=12),
        document,
        device=torch.device("cpu"),
    )
    assert rejection is not None and rejection.reason == Reason.BAD_OUTPUT
    assert "(8, 12)" in rejection.message
