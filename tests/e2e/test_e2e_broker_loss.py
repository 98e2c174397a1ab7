"""A broker that loses its messages does not lose the runs (issue 19 §5): the database is the
source of truth for what work exists, and the watchdog's reconciler sends again what nothing runs.

Its own stack (PostgreSQL, a private Redis database, the API, real worker processes) with a short
``CERTBENCH_RECONCILE_AFTER_SECONDS``. The broker's database is wiped (FLUSHDB: what a Redis restart
without persistence does to it) at three moments — with a validation queued, with shards queued,
and with only the aggregate queued — and every submission still finishes with the records of an
undisturbed run, no shard computed again after it was recorded.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import select

from certbench.data.image_set import Subset
from certbench.data.sources import load_images
from certbench.smoothing.core import certify
from certbench.smoothing.records import read_records
from models.db.engine import session_scope
from models.db.entities import ShardDispatch, StageShard
from models.submissions import storage
from tests.support.e2e import Stack, postgres_database, redis_database, running_stack
from tests.support.flow import put_benchmark, submit, wait_state
from tests.support.processes import start_worker, wait_for
from tests.support.workers import TEST_SETS, manifest, revealed_seed, tiny_model, weights_bytes

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.memory(gib=1.25)]

N = 300
"""Samples per image: slow enough on CPU that the broker is wiped while shards remain."""
STAGE_QUEUES = "certbench,certbench.robustness,certbench.toy"


@pytest.fixture(scope="module")
def lossy(tmp_path_factory) -> Iterator[Stack]:
    with postgres_database() as pg, redis_database() as broker:
        root = tmp_path_factory.mktemp("broker-loss")
        with running_stack(
            root, pg, broker,
            CERTBENCH_RECONCILE_AFTER_SECONDS="6", CERTBENCH_WATCHDOG_INTERVAL_SECONDS="2",
        ) as stack:  # fmt: skip
            yield stack


def _aggregations(stack: Stack) -> list[str]:
    """The workers' log lines about aggregate tasks (the last 20): which worker ran one."""
    return [
        f"{log.name}: {line.strip()}"
        for log in sorted(stack.root.glob("worker-*.log"))
        for line in log.read_text(errors="replace").splitlines()
        if "aggregate" in line
    ][-20:]


def _wipe(stack: Stack) -> None:
    redis.Redis.from_url(stack.env["CERTBENCH_BROKER_URL"]).flushdb()


def _worker(stack: Stack, *queues: str):
    stack.workers_started += 1
    log = stack.root / f"worker-{stack.workers_started}.log"
    extra = ["--queues", ",".join(queues)] if queues else []
    stack.worker = start_worker(stack.env, log, "--hostname",
                                f"loss{stack.workers_started}@%h", *extra)  # fmt: skip
    return stack.worker


def _shards(stack: Stack, sid: int) -> list[StageShard]:
    with session_scope(stack.settings) as session:
        rows = list(session.scalars(select(StageShard).where(StageShard.submission_id == sid)))
        session.expunge_all()
        return rows


def _check_records(stack: Stack, definition: dict, sid: int, model) -> None:
    """Exactly one row per shard, and the merged records of an undisturbed, unsharded run."""
    keys = Counter((s.unit, s.shard_index) for s in _shards(stack, sid))
    assert len(keys) == 2 * len(TEST_SETS) and set(keys.values()) == {1}
    records_dir = stack.settings.artifacts_dir / storage.submission_records_dir(sid)
    with session_scope(stack.settings) as session:
        seed = revealed_seed(session, sid)
    for name in TEST_SETS:
        merged = read_records(records_dir / f"{name}.parquet")
        images = load_images(definition["test_sets"][0]["folder"], config=name,
                             subset=Subset(skip=2))  # fmt: skip
        reference = certify(
            model.eval(), images.as_float(), images.labels, sigma=0.25, n0=4, n=N,
            alpha=0.001, seed=seed, indices=images.indices, test_set=f"{name}/test", device="cpu",
        )  # fmt: skip
        assert [(r.index, r.prediction, r.n_a, r.n_y) for r in merged] == [
            (r.index, r.prediction, r.n_a, r.n_y) for r in reference
        ]


def _never_recomputed(stack: Stack) -> None:
    """A shard task that computed a shard someone had recorded meanwhile returns
    'already recorded: <count> image(s)'; one that skipped it returns 'already recorded'."""
    logs = "".join(p.read_text(errors="replace") for p in stack.root.glob("worker-*.log"))
    assert not re.search(r"already recorded: \d", logs), "a recorded shard was computed again"


def test_wiping_the_broker_at_three_moments_loses_no_run(lossy: Stack, tmp_path: Path):
    stack = lossy
    definition = put_benchmark(stack, "dataset", name="lossy", n=N)
    erin = stack.submitter("erin")
    moments = ("validate", "shards", "aggregate")
    models = {moment: tiny_model(seed=20 + i) for i, moment in enumerate(moments)}

    # 1. A validation message lost: no worker runs, the upload is queued, the broker is wiped.
    stack.worker.stop()
    response = submit(erin, weights_bytes(models["validate"], tmp_path), manifest("lossy"))
    assert response.status_code == 202, response.text
    first = response.json()["id"]
    _wipe(stack)
    _worker(stack)
    wait_state(erin, first, {"finished"}, services=(stack.api, stack.worker), timeout=400)
    _check_records(stack, definition, first, models["validate"])

    # 2. Shard messages lost: wiped while some shards are recorded and the rest queued.
    response = submit(erin, weights_bytes(models["shards"], tmp_path), manifest("lossy"))
    second = response.json()["id"]
    wait_for(
        lambda: 1 <= len(_shards(stack, second)) < 2 * len(TEST_SETS),
        timeout=400, what="a first shard", services=stack.services(),
    )  # fmt: skip
    _wipe(stack)
    wait_state(erin, second, {"finished"}, services=(stack.api, stack.worker), timeout=400)
    _check_records(stack, definition, second, models["shards"])
    with session_scope(stack.settings) as session:
        sent = session.scalars(
            select(ShardDispatch.dispatches).where(ShardDispatch.submission_id == second)
        ).all()
    assert max(sent) >= 2  # the lost ones were sent again

    # 3. The aggregate message lost: shards run by a worker that does not consume the control
    #    queue, the broker wiped once every shard is recorded, then a full worker comes back.
    stack.worker.stop()
    response = submit(erin, weights_bytes(models["aggregate"], tmp_path), manifest("lossy"))
    third = response.json()["id"]
    validator = _worker(stack, "certbench.control")
    wait_for(lambda: erin.get(f"/api/v1/submissions/{third}").json()["state"] == "queued",
             timeout=400, what="validation", services=(stack.api, validator))  # fmt: skip
    validator.stop()
    runner = _worker(stack, *STAGE_QUEUES.split(","))
    wait_for(lambda: len(_shards(stack, third)) == 2 * len(TEST_SETS), timeout=400,
             what="every shard", services=(stack.api, runner))  # fmt: skip
    runner.stop()
    state = erin.get(f"/api/v1/submissions/{third}").json()["state"]
    assert state == "running", (state, _aggregations(stack))
    _wipe(stack)  # the aggregate message the last shard sent is gone
    _worker(stack)
    wait_state(erin, third, {"finished"}, services=(stack.api, stack.worker), timeout=400)
    _check_records(stack, definition, third, models["aggregate"])
    _never_recomputed(stack)
