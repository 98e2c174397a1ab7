"""Intake judges the weights against the declared architecture from the header alone: the
expected tensors are counted on the ``meta`` device (no parameter allocated, whatever the declared
network), an empty header and weights of another architecture are refused at once with one line
(issue 27 §2, issue 25 §4), and nothing is stored."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import load, save
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from certbench.nets import architectures, build_classifier, fit, meta
from models.db.entities import Submission
from tests.support.api import Actors
from tests.support.service_factories import manifest, multipart, weights_bytes

URL = "/api/v1/submissions"


def _lenet_weights() -> bytes:
    model = build_classifier("lenet5", num_classes=10, mean=(0.5,) * 3, std=(0.25,) * 3)
    return save({k: v.contiguous() for k, v in model.state_dict().items()})


def _count(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(Submission))


def test_weights_of_another_architecture_are_refused_in_one_line(
    client: TestClient, actors: Actors, session: Session
):
    response = client.post(URL, headers=actors.alice, **multipart(_lenet_weights(), manifest()))
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "state_dict_mismatch"
    resnet = build_classifier("cifar_resnet20", num_classes=10, mean=(0.5,) * 3, std=(0.25,) * 3)
    weights = [k for k in resnet.state_dict() if not k.endswith("num_batches_tracked")]
    assert body["message"].startswith(
        f"weights have 10 tensors of lenet5, cifar_resnet20 expects {len(weights)}; set the "
        "manifest's architecture.name to 'lenet5'"
    )
    assert "\n" not in body["message"] and len(body["message"]) < 200
    assert _count(session) == 0


def test_weights_with_other_shapes_name_the_first_difference(client: TestClient, actors: Actors):
    state = load(weights_bytes())
    state["1.fc.weight"] = state["1.fc.weight"][:, :32].contiguous()
    response = client.post(URL, headers=actors.alice, **multipart(save(state), manifest()))
    assert response.status_code == 422 and response.json()["code"] == "state_dict_mismatch"
    message = response.json()["message"]
    assert "have other shapes, e.g. 1.fc.weight: weights (10, 32) vs expected (10, 64)" in message


@pytest.mark.parametrize("header", [b"{}", b'{"__metadata__":{"a":"b"}}'], ids=["empty", "meta"])
def test_an_empty_header_is_refused_at_intake(
    client: TestClient, actors: Actors, session: Session, header: bytes
):
    blob = struct.pack("<Q", len(header)) + header
    response = client.post(URL, headers=actors.alice, **multipart(blob, manifest()))
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "state_dict_mismatch"
    assert "holds no tensors" in response.json()["message"]
    assert _count(session) == 0


def test_a_declared_network_is_sized_on_the_meta_device(
    client: TestClient, actors: Actors, monkeypatch: pytest.MonkeyPatch
):
    """A 24-byte upload declaring WRN-40-12 must not build its 300 MB on the CPU: every network
    intake builds is a meta one (today's code built it on the CPU to count its tensors)."""
    devices: list[str] = []
    real = architectures.WideResNet.__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        devices.append(self.fc.weight.device.type)

    monkeypatch.setattr(architectures.WideResNet, "__init__", spy)
    fit._shapes.cache_clear()
    meta.build_meta.cache_clear()
    wrn_40_12 = {"depth": 40, "widen_factor": 12, "dropout": 0.123}
    document = manifest() | {"architecture": {"name": "wrn", "kwargs": wrn_40_12}}
    blob = struct.pack("<Q", 16) + b'{"a":{"dtype":"F'
    response = client.post(URL, headers=actors.alice, **multipart(blob, document))
    assert response.status_code == 422, response.text
    assert devices == ["meta"]


# ---- swapped parts ------------------------------------------------------------------------------


def test_swapped_parts_are_named_not_called_too_large(
    client: TestClient, actors: Actors, session: Session
):
    document = json.dumps(manifest()).encode()
    small = save({"w": torch.zeros(2)})
    cases = {
        "large weights as manifest": multipart(document, weights_bytes()),
        "small weights as manifest": multipart(document, small),
        "manifest as weights": multipart(document, manifest()),
    }
    for case, parts in cases.items():
        response = client.post(URL, headers=actors.alice, **parts)
        assert response.status_code == 422, (case, response.text)
        assert response.json()["code"] == "files_swapped", case
        assert response.json()["message"].startswith(
            "the files look swapped: pass the .safetensors file as --weights"
        )
    assert _count(session) == 0
