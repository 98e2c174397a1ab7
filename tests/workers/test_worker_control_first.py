"""Control work never waits behind another submission's shards, on the embedded stack (issue 34
§1: two reference entries had recorded all their shards by 01:38 and 01:46 and appeared at 01:53;
``submit --wait`` sat 9 min 40 s at "waiting for validation").

A real ``certbench worker --embedded`` (the worker ``certbench serve`` starts) over the SQLite
transport runs three submissions of a benchmark with three slow plug-in stages
(``tests.support.slow_stages``, each on a queue of its own, shards of a set duration) beside
certification. The first is submitted alone; the other two while its slow shards run. Each later
one's validation must start, and each one must be on the board, within one shard's duration of
being submitted and of recording its last shard: measured in shard durations (the slow shards'
recorded seconds), not in fixed seconds. Before the control consumer, the worker took one
message at a time from its queues in turn, so a control message waited for one shard of every
busy stage queue.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from celery import Celery
from sqlalchemy import select

import migrations
from models.core.queue import CONTROL_QUEUE, TASK_VALIDATE, celery_config
from models.core.settings import Settings
from models.db.engine import dispose_engines, session_scope
from models.db.entities import ShardDispatch, StageShard, Submission, SubmissionEvent
from models.db.states import SubmissionState
from tests.support import slow_stages, timing
from tests.support.processes import Service, service_env, start_worker, wait_for
from tests.support.workers import (
    create_submission,
    load_benchmark,
    manifest,
    tiny_definition,
    tiny_model,
    weights_bytes,
    write_tiny_dataset,
)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
#: Seconds each slow shard sleeps: long against a poll of the queue and an aggregation on this
#: machine (stretched with its load, as every deadline is), short enough for a quick test.
SHARD_SECONDS = round(timing.seconds(2.5), 1)
ENV = {
    "CERTBENCH_SHARD_SIZE": "1",
    "CERTBENCH_WORKER_DEVICE": "cpu",
    "CERTBENCH_HEARTBEAT_SECONDS": "2",
    "CERTBENCH_WATCHDOG_INTERVAL_SECONDS": "5",
    "CERTBENCH_STAGE_PLUGINS": "tests.support.slow_stages",
    "PYTHONPATH": str(ROOT),
}


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[tuple[Settings, Service]]:
    env = service_env(CERTBENCH_DATA_DIR=str(tmp_path / "data"), **ENV)
    settings = Settings(data_dir=tmp_path / "data", shard_size=1, worker_device="cpu")
    migrations.upgrade(settings)
    dataset = write_tiny_dataset(tmp_path / "dataset")
    definition = tiny_definition(dataset)
    definition["stages"] = slow_stages.stage_blocks(SHARD_SECONDS)
    with session_scope(settings) as session:
        load_benchmark(session, definition)
    worker = start_worker(env, tmp_path / "worker.log", "--embedded")
    yield settings, worker
    worker.stop()
    dispose_engines()


def _submit(settings: Settings, client: Celery, folder: Path, seed: int) -> int:
    """A submission made through the intake, its validation queued as the API queues it."""
    with session_scope(settings) as session:
        sid = create_submission(
            session,
            settings,
            weights=weights_bytes(tiny_model(seed), folder / f"upload-{seed}"),
            manifest_doc=manifest(metadata={"name": f"model {seed}", "authors": ["tests"]}),
            user=f"user{seed}",
        )
    client.send_task(TASK_VALIDATE, args=[sid], queue=CONTROL_QUEUE)
    return sid


def _slow_shard_running(settings: Settings, sid: int) -> bool:
    with session_scope(settings) as session:
        return (
            session.scalar(
                select(ShardDispatch.stage).where(
                    ShardDispatch.submission_id == sid,
                    ShardDispatch.stage.in_(slow_stages.NAMES),
                    ShardDispatch.claimed_by.is_not(None),
                )
            )
            is not None
        )


def _all_ended(settings: Settings, ids: list[int]) -> bool:
    with session_scope(settings) as session:
        states = [session.get(Submission, sid) for sid in ids]
        for submission in states:
            if submission.state in (SubmissionState.FAILED, SubmissionState.REJECTED):
                raise AssertionError(f"{submission.id} {submission.state}: {submission.message}")
        return all(s.state == SubmissionState.FINISHED for s in states)


def _timeline(settings: Settings, sid: int) -> dict[str, datetime | float]:
    with session_scope(settings) as session:
        submission = session.get(Submission, sid)
        shards = session.scalars(select(StageShard).where(StageShard.submission_id == sid)).all()
        validating = session.scalar(
            select(SubmissionEvent.at).where(
                SubmissionEvent.submission_id == sid,
                SubmissionEvent.to_state == SubmissionState.VALIDATING,
            )
        )
        return {
            "created": submission.created_at,
            "validating": validating,
            "last_shard": max(s.created_at for s in shards),
            "finished": submission.finished_at,
            "slow_seconds": statistics.median(
                s.seconds for s in shards if s.stage in slow_stages.NAMES
            ),
        }


def test_validation_and_aggregation_never_wait_behind_other_shards(embedded, tmp_path):
    settings, worker = embedded
    client = Celery("certbench-api-client")
    client.conf.update(celery_config(settings))
    first = _submit(settings, client, tmp_path, seed=0)
    wait_for(lambda: _slow_shard_running(settings, first), timeout=300,
             what="a slow shard of the first submission", services=(worker,))  # fmt: skip
    ids = [first, _submit(settings, client, tmp_path, seed=1),
           _submit(settings, client, tmp_path, seed=2)]  # fmt: skip
    wait_for(lambda: _all_ended(settings, ids), timeout=600, what="three submissions to finish",
             services=(worker,))  # fmt: skip

    lines, late = [], []
    for sid in ids:
        times = _timeline(settings, sid)
        shard = float(times["slow_seconds"])
        waited = (times["validating"] - times["created"]).total_seconds()  # type: ignore[operator]
        shown = (times["finished"] - times["last_shard"]).total_seconds()  # type: ignore[operator]
        lines.append(
            f"submission {sid}: validation began {waited:.1f} s ({waited / shard:.2f} shards) "
            f"after submitting; on the board {shown:.1f} s ({shown / shard:.2f} shards) after "
            f"its last shard (shard {shard:.1f} s)"
        )
        if sid != first and waited > shard:
            late.append(f"validation of {sid}")
        if shown > shard:
            late.append(f"entry of {sid}")
    print("\n".join(lines))
    assert not late, f"waited longer than one shard: {late}\n" + "\n".join(lines)
