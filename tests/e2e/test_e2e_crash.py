"""Crash safety: kill -9 the worker in the middle of a submission, start a new one, and the run
finishes with exactly one result per test set, no duplicate shards and the records of an
undisturbed run.

The killed shard's claim lapses with its lease (20 s here) and the watchdog's reconciler sends it
again; its message, unacknowledged in Redis (acks_late), is re-delivered after the visibility
timeout (45 s) and finds the shard claimed or recorded. Finished shards are not recomputed.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

import pytest
from sqlalchemy import select

from certbench.data.image_set import Subset
from certbench.data.sources import load_images
from certbench.smoothing.core import certify
from certbench.smoothing.records import read_records
from models.boards.leaderboard import certification_results
from models.core.queue import CONTROL_QUEUE
from models.db.engine import session_scope
from models.db.entities import ShardDispatch, StageShard, Submission
from models.submissions import storage
from tests.support.flow import put_benchmark, submit, wait_state
from tests.support.processes import wait_for
from tests.support.workers import TEST_SETS, manifest, revealed_seed, tiny_model, weights_bytes

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.memory(gib=1.5)]

N = 400
"""Samples per image: slow enough on CPU that the kill lands while shards remain."""


def test_kill_9_mid_submission_then_a_new_worker_finishes_it(stack, tmp_path):
    definition = put_benchmark(stack, "crash-dataset", name="crash", n=N)
    carol = stack.submitter("carol")
    model = tiny_model(seed=5)
    response = submit(carol, weights_bytes(model, tmp_path), manifest(benchmark="crash"))
    assert response.status_code == 202, response.text
    sid = response.json()["id"]

    def some_but_not_all_shards() -> dict | None:
        body = carol.get(f"/api/v1/submissions/{sid}").json()
        assert body["state"] not in {"finished", "failed"}, body
        return body if body["state"] == "running" and body["shards_done"] >= 1 else None

    before = wait_for(
        some_but_not_all_shards, timeout=400, what="a first shard", services=stack.services()
    )
    first = stack.worker
    first.kill_group()
    assert not first.alive()
    with session_scope(stack.settings) as session:
        done_at_kill = len(
            session.scalars(select(StageShard).where(StageShard.submission_id == sid)).all()
        )
    assert 1 <= done_at_kill < before["shards_total"]

    second = stack.start_worker()
    done = wait_state(carol, sid, {"finished"}, services=(stack.api, second), timeout=600)
    assert done["shards_done"] == done["shards_total"] == 2 * len(TEST_SETS)
    moves = [event["to_state"] for event in done["events"]]
    assert moves == ["submitted", "validating", "queued", "running", "finished"]

    with session_scope(stack.settings) as session:
        shards = session.scalars(select(StageShard).where(StageShard.submission_id == sid)).all()
        keys = Counter((s.unit, s.shard_index) for s in shards)
        assert len(keys) == done["shards_total"] and set(keys.values()) == {1}
        workers = {s.worker.split("@")[0] for s in shards}
        assert workers == {"e2e1", f"e2e{stack.workers_started}"}  # resumed, not redone
        results = certification_results(session, sid)
        assert sorted(r.test_set.name for r in results) == sorted(TEST_SETS)
        assert session.get(Submission, sid).reason == "completed"
        seed = revealed_seed(session, sid)

    records_dir = stack.settings.artifacts_dir / storage.submission_records_dir(sid)
    for name in TEST_SETS:
        shard_files = sorted(p.name for p in (records_dir / name).glob("shard-*.parquet"))
        assert shard_files == ["shard-00000.parquet", "shard-00001.parquet"]
        merged = read_records(records_dir / f"{name}.parquet")
        images = load_images(
            definition["test_sets"][0]["folder"], config=name, subset=Subset(skip=2)
        )
        reference = certify(
            model.eval(), images.as_float(), images.labels, sigma=0.25, n0=4, n=N,
            alpha=0.001, seed=seed, indices=images.indices, test_set=f"{name}/test", device="cpu",
        )  # fmt: skip
        assert [(r.index, r.prediction, r.n_a, r.n_y) for r in merged] == [
            (r.index, r.prediction, r.n_a, r.n_y) for r in reference
        ]


def test_kill_9_of_the_pool_process_reruns_its_shard_on_the_same_worker(stack, tmp_path):
    """reject/retry on worker lost: the worker's parent notices its pool process died and sends
    the shard again (bounded by max_retries); no restart and no visibility timeout needed."""
    put_benchmark(stack, "child-dataset", name="child", n=5 * N)
    grace = stack.submitter("grace")
    response = submit(grace, weights_bytes(tiny_model(seed=6), tmp_path), manifest("child"))
    assert response.status_code == 202, response.text
    sid = response.json()["id"]

    def mid_shard() -> bool | None:
        """A shard after the first is claimed and not recorded: the pool process is computing
        it. (Killed between two shards, it would be replaced without a lost task: under load the
        kill once landed 70 ms after the next message was received, before the pool took it.)"""
        body = grace.get(f"/api/v1/submissions/{sid}").json()
        assert body["state"] != "finished", "finished before the kill"
        return (body["shards_done"] >= 1 and _shard_in_flight(stack, sid)) or None

    wait_for(mid_shard, timeout=400, what="a shard in flight", services=stack.services())
    worker = stack.worker
    (pool,) = _pool_children(worker.pid)
    os.kill(pool, signal.SIGKILL)
    done = wait_state(grace, sid, {"finished"}, services=stack.services(), timeout=600)
    assert done["shards_done"] == done["shards_total"] == 2 * len(TEST_SETS)
    assert worker.alive() and _pool_children(worker.pid) != [pool]
    assert "WorkerLostError" in worker.log.read_text(errors="replace")
    with session_scope(stack.settings) as session:
        shards = session.scalars(select(StageShard).where(StageShard.submission_id == sid)).all()
        assert len({(s.unit, s.shard_index) for s in shards}) == len(shards) == 4
        results = certification_results(session, sid)
        assert sorted(r.test_set.name for r in results) == sorted(TEST_SETS)


def _shard_in_flight(stack, sid: int) -> bool:
    """Whether a shard of ``sid`` is claimed by a worker and not yet recorded."""
    with session_scope(stack.settings) as session:
        claimed = session.execute(
            select(ShardDispatch.stage, ShardDispatch.unit, ShardDispatch.shard_index).where(
                ShardDispatch.submission_id == sid, ShardDispatch.claimed_by.is_not(None)
            )
        ).all()
        recorded = session.execute(
            select(StageShard.stage, StageShard.unit, StageShard.shard_index).where(
                StageShard.submission_id == sid
            )
        ).all()
    return bool({tuple(row) for row in claimed} - {tuple(row) for row in recorded})


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as handle:
        return [int(p) for p in handle.read().split()]


def _pool_children(pid: int) -> list[int]:
    """The worker's prefork pool processes: its children other than its control consumer
    (``workers.commands.ControlConsumer``, a ``certbench worker --queues control`` child)."""
    return [child for child in _children(pid) if CONTROL_QUEUE not in _command_line(child)]


def _command_line(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        return [part.decode(errors="replace") for part in handle.read().split(b"\0") if part]
