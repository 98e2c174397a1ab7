"""Bad uploads end rejected with the right reason and leave no artifacts behind.

Cheap problems are refused by the API before anything is stored (no submission, no file),
including weights whose tensors do not fit the declared architecture (judged from the header);
the ones that need the model run (NaN outputs) are rejected by the worker's validate task, which
deletes the stored weights.
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import pytest

from models.submissions import storage
from tests.support.flow import submit, wait_state
from tests.support.workers import manifest, overflowing_model, tiny_model, weights_bytes

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.memory(gib=1.5)]


def _stored_weights(root: Path) -> set[str]:
    return {p.name for p in (root / "weights").rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def dave(stack, tiny):
    return stack.submitter("dave")


@pytest.fixture(scope="module")
def good_weights(tmp_path_factory) -> bytes:
    return weights_bytes(tiny_model(seed=11), tmp_path_factory.mktemp("dave"))


def _api_cases(good: bytes) -> dict[str, tuple[bytes, object, int, str]]:
    state = {k: v.numpy() for k, v in tiny_model().state_dict().items()}
    return {
        "not safetensors": (b"these bytes are not a weights file\n" * 8, manifest(), 422,
                            "not_safetensors"),
        "pickle": (pickle.dumps(state, protocol=4), manifest(), 422, "not_safetensors"),
        "truncated": (good[: len(good) // 2], manifest(), 422, "truncated_weights"),
        "wrong architecture": (good, manifest(architecture={"name": "resnet9000", "kwargs": {}}),
                               422, "unknown_architecture"),
        "oversized": (b"\0" * (3 * 1024 * 1024 + 1), manifest(), 413, "too_large"),
        "bad manifest JSON": (good, b'{"benchmark": "tiny", "architecture": ', 422,
                              "bad_manifest"),
        # ResNet-20 weights declared as a ResNet-56: refused from the header, one line
        "wrong shapes": (good, manifest(architecture={"name": "cifar_resnet56", "kwargs": {}}),
                         422, "state_dict_mismatch"),
    }  # fmt: skip


@pytest.mark.parametrize(
    "case",
    ["not safetensors", "pickle", "truncated", "wrong architecture", "oversized",
     "bad manifest JSON", "wrong shapes"],
)  # fmt: skip
def test_api_refuses_before_storing_anything(case, stack, dave, good_weights):
    weights, document, status, code = _api_cases(good_weights)[case]
    before_files = _stored_weights(stack.settings.artifacts_dir)
    before_count = dave.get("/api/v1/submissions").json()["total"]
    response = submit(dave, weights, document)
    assert response.status_code == status, response.text
    assert response.json()["code"] == code
    assert response.json()["message"]
    assert _stored_weights(stack.settings.artifacts_dir) == before_files
    assert dave.get("/api/v1/submissions").json()["total"] == before_count


def test_worker_rejects_models_that_cannot_be_certified(stack, dave, tmp_path):
    weights, document = weights_bytes(overflowing_model(), tmp_path), manifest()
    response = submit(dave, weights, document)
    assert response.status_code == 202, response.text
    sid = response.json()["id"]
    stored = stack.settings.artifacts_dir / storage.weights_relpath(
        hashlib.sha256(weights).hexdigest()
    )
    done = wait_state(dave, sid, {"rejected"}, services=stack.services())
    assert done["reason"] == "non_finite_output", done
    assert done["message"]
    assert [e["to_state"] for e in done["events"]] == ["submitted", "validating", "rejected"]
    assert not stored.exists()
    assert not (stack.settings.artifacts_dir / storage.submission_records_dir(sid)).exists()
    assert dave.get(f"/api/v1/results/{sid}").json()["results"] == []
