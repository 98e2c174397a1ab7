"""The intake estimate and ETA in the entry's own cost (issue 33 §3), over HTTP: intake counts
each network's FLOPs per sample on ``meta`` and stores them; once this fleet has recorded a shard
of a ResNet-20, a ResNet-56 submitted next is estimated at this fleet's FLOP rate over its own
FLOPs per sample (about three times the ResNet-20's time), not at the ResNet-20's samples/s."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from safetensors.torch import save
from sqlalchemy.orm import Session

from certbench.nets import build_classifier, load_manifest
from certbench.nets.cost import manifest_cost
from models.core.settings import Settings
from models.db.entities import Submission
from models.db.states import SubmissionState as S
from models.runs import shards
from models.submissions import lifecycle as pipeline
from tests.support.api import Actors
from tests.support.service_factories import manifest, multipart, record_shard, weights_bytes

URL = "/api/v1/submissions"
TINY_PASSES = 120  # ``tiny``: 2 test sets × 3 images × (n0 4 + n 16)
MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


def _resnet56() -> tuple[bytes, dict]:
    model = build_classifier("cifar_resnet56", num_classes=10, mean=MEAN, std=STD)
    document = manifest(name="resnet56") | {"architecture": {"name": "cifar_resnet56"}}
    return save({k: v.contiguous() for k, v in model.state_dict().items()}), document


def test_the_estimate_divides_the_fleets_flop_rate_by_the_networks_flops(
    client: TestClient, actors: Actors, settings: Settings, session: Session
):
    light = client.post(URL, headers=actors.bob, **multipart(weights_bytes(1), manifest()))
    sid = light.json()["id"]
    for source, target in ((S.SUBMITTED, S.VALIDATING), (S.VALIDATING, S.QUEUED),
                           (S.QUEUED, S.RUNNING)):  # fmt: skip
        assert pipeline.transition(session, sid, from_states={source}, to_state=target,
                                   settings=settings)  # fmt: skip
    spec = next(s for s in shards.plan(session, sid, settings=settings) if s.unit == "set0")
    assert shards.claim(session, sid, spec, worker="w1", settings=settings) is None
    assert record_shard(session, sid, spec, settings=settings)  # 60 forward passes in 0.5 s

    flops20 = manifest_cost(load_manifest(manifest())).flops_per_sample
    weights, document = _resnet56()
    flops56 = manifest_cost(load_manifest(document)).flops_per_sample
    same = client.post(URL, headers=actors.alice, **multipart(weights_bytes(2), manifest()))
    heavy = client.post(URL, headers=actors.alice, **multipart(weights, document))
    assert same.status_code == heavy.status_code == 202, heavy.text
    session.expire_all()
    stored = {session.get(Submission, r.json()["id"]).flops_per_sample for r in (same, heavy)}
    assert stored == {flops20, flops56} and flops56 > 2.5 * flops20

    same_estimate, heavy_estimate = same.json()["estimate"], heavy.json()["estimate"]
    assert same_estimate["seconds"] == pytest.approx(TINY_PASSES / 120.0)  # as measured
    assert heavy_estimate["seconds"] == pytest.approx(TINY_PASSES / 120.0 * flops56 / flops20)
    assert heavy_estimate["stages"][0]["samples_per_second"] == pytest.approx(
        120.0 * flops20 / flops56
    )
    assert f"over this network's {flops56:,} FLOPs per sample" in heavy_estimate["basis"]
    assert heavy.json()["eta_seconds"] > same.json()["eta_seconds"]
