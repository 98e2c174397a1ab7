"""One source of truth for progress, measured throughput and ETA, the estimate at intake and the
daily compute quota, over HTTP (SQLite + embedded broker, PostgreSQL + Redis)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session

from api.main import create_app
from models.catalog.benchmarks import parse_definition, upsert_benchmark
from models.core.settings import Settings
from models.db.base import utcnow
from models.db.entities import ShardDispatch, Submission
from models.db.states import SubmissionState as S
from models.runs import progress, shards
from models.stages.base import ShardSpec
from models.submissions import compute_quota
from models.submissions import lifecycle as pipeline
from tests.support.api import Actors
from tests.support.service_factories import (
    manifest,
    multipart,
    record_robustness_shard,
    record_shard,
    tiny_definition,
    weights_bytes,
)

URL = "/api/v1/submissions"
#: FLOPs per sample of the factories' CIFAR ResNet-20, counted on the meta device.
F = compute_quota.network_flops(manifest())
#: ``tiny``: 2 test sets × 3 images × (n0 4 + n 16) = 120 forward passes, all certification.
TINY_PASSES = 120
#: ``weighted`` adds the PD robustness stage on 3 images: 3 × (1 + 2 ε × 4 plans × 13) = 315.
ROBUSTNESS = {
    "repo": "certbench/weighted",
    "config": "clean",
    "source_size": 6,
    "anchors": "tiny_k2_s0.safetensors",
    "k": 2,
    "eps": [8, 16],
    "n_iter": 5,
    "n_target_classes": 3,
}
CERTIFY, ATTACK = 120, 315


def _running(
    client: TestClient,
    session: Session,
    settings: Settings,
    headers: dict[str, str],
    *,
    benchmark: str = "tiny",
    seed: int = 0,
) -> tuple[int, dict[tuple, ShardSpec]]:
    response = client.post(
        URL, headers=headers, **multipart(weights_bytes(seed), manifest(benchmark=benchmark))
    )
    assert response.status_code == 202, response.text
    sid = response.json()["id"]
    for source, target in ((S.SUBMITTED, S.VALIDATING), (S.VALIDATING, S.QUEUED),
                           (S.QUEUED, S.RUNNING)):  # fmt: skip
        assert pipeline.transition(
            session, sid, from_states={source}, to_state=target, settings=settings
        )
    return sid, {spec.key[:2]: spec for spec in shards.plan(session, sid, settings=settings)}


def _in_flight(session: Session, settings: Settings, sid: int, spec: ShardSpec, *, images: int,
               samples: int, seconds: float) -> None:  # fmt: skip
    """A worker claimed ``spec`` and reported ``images`` / ``samples`` after ``seconds``."""
    assert shards.claim(session, sid, spec, worker="w1", settings=settings) is None
    progress.record_partial(
        session, sid, spec.key, worker="w1", images=images, samples=samples, settings=settings
    )
    started = utcnow() - timedelta(seconds=seconds)
    session.execute(
        update(ShardDispatch)
        .where(
            ShardDispatch.submission_id == sid,
            ShardDispatch.stage == spec.stage,
            ShardDispatch.unit == spec.unit,
        )
        .values(started_at=started, updated_at=started + timedelta(seconds=seconds))
    )
    session.commit()


def test_the_submission_fraction_is_the_progress_endpoints_weighted_by_work(
    client: TestClient, actors: Actors, settings: Settings, session: Session
):
    definition = tiny_definition("weighted") | {"robustness": ROBUSTNESS}
    upsert_benchmark(session, parse_definition(json.dumps(definition)))
    sid, plan = _running(client, session, settings, actors.alice, benchmark="weighted")
    record_robustness_shard(
        session, sid, plan[("pd_robustness", "")], (3, {8: (1, 2, 3), 16: (0, 1, 2)}),
        settings=settings, anchors_sha256="ab" * 32,
    )  # fmt: skip
    _in_flight(session, settings, sid, plan[("certification", "set0")], images=2, samples=40,
               seconds=10)  # fmt: skip
    done = ATTACK + 40
    status = client.get(f"{URL}/{sid}", headers=actors.alice).json()
    report = client.get(f"{URL}/{sid}/progress", headers=actors.alice).json()
    listed = client.get(URL, headers=actors.alice).json()["items"][0]
    expected = done / (CERTIFY + ATTACK)
    assert status["progress"] == report["progress"] == listed["progress"] == pytest.approx(expected)
    assert status["progress"] != pytest.approx(1 / 3)  # one of three shards: not by shard count
    session.expire_all()
    assert session.get(Submission, sid).progress == pytest.approx(expected)  # stored, the same
    assert (status["samples_done"], status["samples_total"]) == (done, CERTIFY + ATTACK)
    assert (report["samples_done"], report["images_done"], report["images_total"]) == (
        done, 2 + 3, 6 + 3,
    )  # fmt: skip
    stages = {s["stage"]: s for s in report["stages"]}
    assert (stages["certification"]["samples_done"], stages["certification"]["images_done"]) == (
        40, 2,
    )  # fmt: skip
    assert stages["pd_robustness"]["samples_done"] == stages["pd_robustness"]["samples_total"]
    assert not stages["pd_robustness"]["exact"] and stages["certification"]["exact"]
    units = {(u["stage"], u["unit"]): u for u in report["units"]}
    assert units[("certification", "set0")] == {
        "stage": "certification", "unit": "set0", "shards_done": 0, "shards_running": 1,
        "shards_total": 1, "images_done": 2, "images_total": 3, "samples_done": 40,
        "samples_total": 60,
    }  # fmt: skip
    assert units[("pd_robustness", "")]["shards_done"] == 1
    assert report["test_sets"] == [
        {"test_set": "set0", "images_done": 2, "images_total": 3},
        {"test_set": "set1", "images_done": 0, "images_total": 3},
    ]
    assert client.get(f"{URL}/{sid}/progress", headers=actors.bob).status_code == 404


def test_throughput_and_eta_come_from_the_running_then_the_recorded_shards(
    client: TestClient, actors: Actors, settings: Settings, session: Session
):
    sid, plan = _running(client, session, settings, actors.alice)
    waiting = client.get(f"{URL}/{sid}", headers=actors.alice).json()
    assert waiting["throughput"] is None and waiting["eta_seconds"] is None
    assert "no certification shard has reported" in waiting["eta_basis"]
    # a worker certified 2 of set0's 3 images (40 forward passes) in 10 s: 4 samples/s
    _in_flight(session, settings, sid, plan[("certification", "set0")], images=2, samples=40,
               seconds=10)  # fmt: skip
    status = client.get(f"{URL}/{sid}", headers=actors.alice).json()
    assert status["throughput"]["samples_per_second"] == pytest.approx(4.0)
    assert status["throughput"]["images_per_second"] == pytest.approx(0.2)
    assert status["eta_seconds"] == pytest.approx((TINY_PASSES - 40) / 4.0)
    assert "4 samples/s" in status["eta_basis"] and "running now" in status["eta_basis"]
    report = client.get(f"{URL}/{sid}/progress", headers=actors.alice).json()
    assert report["eta_seconds"] == status["eta_seconds"]
    assert report["throughput"] == status["throughput"]
    # set0 recorded in 0.5 s (60 passes: 120 samples/s), nothing running: the recorded rate
    assert record_shard(session, sid, plan[("certification", "set0")], settings=settings)
    shards.release_claim(session, sid, plan[("certification", "set0")].key, worker="w1")
    status = client.get(f"{URL}/{sid}", headers=actors.alice).json()
    assert status["throughput"]["samples_per_second"] == pytest.approx(120.0)
    assert status["eta_seconds"] == pytest.approx(60 / 120.0)
    assert status["progress"] == pytest.approx(0.5)
    assert status["estimate"]["forward_passes"] == TINY_PASSES


def test_the_estimate_is_in_the_202_and_the_benchmark_and_timed_once_measured(
    client: TestClient, actors: Actors, settings: Settings, session: Session
):
    first = client.post(URL, headers=actors.alice, **multipart(weights_bytes(0), manifest()))
    estimate = first.json()["estimate"]
    assert first.status_code == 202 and estimate["forward_passes"] == TINY_PASSES
    assert estimate["flops"] == TINY_PASSES * F  # what the compute quota charges
    assert estimate["exact"] and estimate["seconds"] is None
    assert "no certification shard has been measured" in estimate["basis"]
    assert estimate["stages"][0] | {"basis": ""} == {
        "stage": "certification", "forward_passes": TINY_PASSES, "exact": True, "note": "",
        "basis": "", "samples_per_second": None,
    }  # fmt: skip
    # this fleet records a shard of 60 forward passes in 0.5 s (its dispatch row has the counts)
    sid, plan = _running(client, session, settings, actors.bob, seed=1)
    spec = plan[("certification", "set0")]
    assert shards.claim(session, sid, spec, worker="w1", settings=settings) is None
    assert record_shard(session, sid, spec, settings=settings)
    second = client.post(URL, headers=actors.alice, **multipart(weights_bytes(2), manifest()))
    timed = second.json()["estimate"]
    assert timed["stages"][0]["samples_per_second"] == pytest.approx(120.0)
    assert timed["seconds"] == pytest.approx(TINY_PASSES / 120.0)
    benchmark = client.get("/api/v1/benchmarks/tiny").json()["estimate"]
    assert benchmark["forward_passes"] == TINY_PASSES
    assert benchmark["seconds"] == pytest.approx(1.0)


def test_the_compute_quota_refuses_with_422_and_429(actors: Actors, settings: Settings):
    tight = settings.model_copy(update={"quota_flops_per_day": 200 * F})
    with TestClient(create_app(tight), raise_server_exceptions=False) as client:
        first = client.post(URL, headers=actors.alice, **multipart(weights_bytes(0), manifest()))
        assert first.status_code == 202
        me = client.get("/api/v1/me", headers=actors.alice).json()["quota"]
        assert (me["forward_passes_today"], me["flops_today"], me["flops_per_day"]) == (
            TINY_PASSES, TINY_PASSES * F, 200 * F)  # fmt: skip
        second = client.post(URL, headers=actors.alice, **multipart(weights_bytes(1), manifest()))
        body = second.json()
        assert second.status_code == 429 and body["code"] == "quota_compute"
        assert body["details"][0] | {"retry_after_seconds": 0} == {
            "flops": TINY_PASSES * F, "used": TINY_PASSES * F, "limit": 200 * F, "left": 80 * F,
            "retry_after_seconds": 0,
        }  # fmt: skip
        retry = int(second.headers["retry-after"])
        assert 86_000 < retry <= 86_400  # when the first submission leaves the 24-hour window
        assert body["details"][0]["retry_after_seconds"] == retry
        assert f"{80 * F:.4g} of your daily compute quota of {200 * F:.4g} FLOPs" in body["message"]
        admin = client.post(URL, headers=actors.admin, **multipart(weights_bytes(1), manifest()))
        assert admin.status_code == 202  # admins are exempt
        # a cancelled run is charged what it computed (nothing here): the quota frees up
        sid = first.json()["id"]
        assert client.post(f"{URL}/{sid}/cancel", headers=actors.alice).status_code == 200
        again = client.post(URL, headers=actors.alice, **multipart(weights_bytes(2), manifest()))
        assert again.status_code == 202
    tiny = settings.model_copy(update={"quota_flops_per_day": 100 * F})
    with TestClient(create_app(tiny), raise_server_exceptions=False) as client:
        refused = client.post(URL, headers=actors.bob, **multipart(weights_bytes(3), manifest()))
        assert refused.status_code == 422 and refused.json()["code"] == "estimate_exceeds_quota"
        assert f"estimated at {TINY_PASSES * F:.4g} FLOPs" in refused.json()["message"]
        assert client.get(URL, headers=actors.bob).json()["total"] == 0  # nothing stored
