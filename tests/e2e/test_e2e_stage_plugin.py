"""A stage added by a plug-in module alone runs through the real pipeline and lands once.

``toy_stage`` is registered in the API and the worker processes by ``CERTBENCH_STAGE_PLUGINS``
(see ``tests.support.e2e.SERVICE_ENV``); no pipeline, task, lease or migration code names it. The
worker is
killed with SIGKILL while a toy shard sleeps inside ``run``; a new worker resumes, the killed
shard is sent again once its claim lapses (and its message comes back from Redis after the
visibility timeout, finding it done), and every toy shard is recorded exactly once with the
values of an undisturbed run.
"""

from __future__ import annotations

from collections import Counter

import pytest
from sqlalchemy import select

from models.db.engine import session_scope
from models.db.entities import MetricValue, StageResult, StageShard
from tests.support.flow import put_benchmark, submit, wait_state
from tests.support.processes import wait_for
from tests.support.toy_stage import UNITS, expected_values
from tests.support.workers import manifest, revealed_seed, tiny_model, weights_bytes

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.memory(gib=1.5)]

IMAGES = 3
SEED = 11


def _toy_rows(stack, sid: int) -> list[StageShard]:
    with session_scope(stack.settings) as session:
        rows = session.scalars(
            select(StageShard).where(StageShard.submission_id == sid, StageShard.stage == "toy")
        ).all()
        session.expunge_all()
        return list(rows)


def test_a_plugin_stage_survives_kill_9_and_lands_exactly_once(stack, tmp_path):
    definition = put_benchmark(stack, "toy-dataset", name="toy", seed=SEED,
        stages={"toy": {"images": IMAGES, "seconds_per_image": 2.0}},
    )  # fmt: skip
    assert definition["stages"]["toy"]["images"] == IMAGES
    dana = stack.submitter("dana")
    response = submit(dana, weights_bytes(tiny_model(seed=2), tmp_path), manifest(benchmark="toy"))
    assert response.status_code == 202, response.text
    sid = response.json()["id"]

    def toy_half_done() -> list[StageShard] | None:
        rows = _toy_rows(stack, sid)
        return rows if 1 <= len(rows) < len(UNITS) * IMAGES else None

    wait_for(toy_half_done, timeout=400, what="a first toy shard", services=stack.services())
    killed = f"e2e{stack.workers_started}"
    stack.worker.kill_group()  # mid-shard: every toy shard sleeps 2 s inside Stage.run
    assert not stack.worker.alive()
    second = stack.start_worker()
    done = wait_state(dana, sid, {"finished"}, services=(stack.api, second), timeout=600)
    assert done["shards_done"] == done["shards_total"]

    rows = _toy_rows(stack, sid)
    keys = Counter((r.unit, r.shard_index) for r in rows)
    assert set(keys) == {(u, i) for u in UNITS for i in range(IMAGES)}
    assert set(keys.values()) == {1}  # exactly once, although a shard was cut off mid-run
    assert {r.worker.split("@")[0] for r in rows} == {killed, f"e2e{stack.workers_started}"}
    with session_scope(stack.settings) as session:
        expected = expected_values(revealed_seed(session, sid), IMAGES)  # the run's own seed
        results = session.scalars(
            select(StageResult).where(StageResult.submission_id == sid, StageResult.stage == "toy")
        ).all()
        assert {r.unit: r.summary["values"] for r in results} == expected
        metric = session.get(MetricValue, (sid, "toy_mean"))
        mean = sum(sum(v) for v in expected.values()) / (len(UNITS) * IMAGES)
        assert metric is not None and metric.value == pytest.approx(mean)

    body = dana.get(f"/api/v1/results/{sid}").json()
    toy = [s for s in body["stages"] if s["stage"] == "toy"]
    assert {s["unit"]: s["summary"]["values"] for s in toy} == expected
    board = dana.get("/api/v1/leaderboards/toy", params={"sort": "toy_mean"}).json()
    row = next(r for r in board["rows"] if r["submission_id"] == sid)
    assert row["metrics"]["toy_mean"] == pytest.approx(mean)
    assert body["summary"]["macr"] is not None  # certification ran beside it
