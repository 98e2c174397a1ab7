"""The control-first measurement (issue 34 §1), shared by the embedded and the distributed test.

A benchmark of the tiny certification stage (two shards: one per test set) and three slow
plug-in stages (``tests.support.slow_stages``, each on a queue of its own, one shard of a set
duration each). Three submissions queued at once. Measured in shard durations (the slow shards'
median recorded seconds), never in fixed seconds: how long after being submitted each one's
validation began, and how long after its last shard each one was on the board (finished, its
entry stored). Before the control consumer, a worker took one message at a time from its queues
in turn, so a control message waited for one shard of every busy stage queue: the second and
third validations began about 3 and 6 shards late, and the first entry appeared about 6 shards
after its last shard (the order kombu's fair cycle gives these queues).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from celery import Celery
from sqlalchemy import select

from models.core.queue import CONTROL_QUEUE, TASK_VALIDATE, celery_config
from models.core.settings import Settings
from models.db.engine import session_scope
from models.db.entities import StageShard, Submission, SubmissionEvent
from models.db.states import SubmissionState
from tests.support import slow_stages, timing
from tests.support.processes import Service, wait_for
from tests.support.workers import (
    create_submission,
    load_benchmark,
    manifest,
    tiny_definition,
    tiny_model,
    weights_bytes,
    write_tiny_dataset,
)

ROOT = Path(__file__).resolve().parents[2]
#: Seconds each slow shard sleeps: long against a poll of the queue and an aggregation on this
#: machine (stretched with its load, as every deadline is), short enough for a quick test.
SHARD_SECONDS = round(timing.seconds(2.5), 1)
#: Celery nodes per ``certbench worker``: the worker and its control consumer.
READY_NODES = 2
#: The worker processes' environment (besides the database, broker and data folder).
ENV = {
    "CERTBENCH_SHARD_SIZE": "2",
    "CERTBENCH_WORKER_DEVICE": "cpu",
    "CERTBENCH_HEARTBEAT_SECONDS": "2",
    "CERTBENCH_WATCHDOG_INTERVAL_SECONDS": "5",
    "CERTBENCH_STAGE_PLUGINS": "tests.support.slow_stages",
    "PYTHONPATH": str(ROOT),
}


def load_slow_benchmark(settings: Settings, folder: Path) -> None:
    """The tiny benchmark with every slow stage, its shards SHARD_SECONDS long."""
    definition = tiny_definition(write_tiny_dataset(folder / "dataset"))
    definition["stages"] = slow_stages.stage_blocks(SHARD_SECONDS)
    with session_scope(settings) as session:
        load_benchmark(session, definition)


def measure(settings: Settings, folder: Path, services: tuple[Service, ...]) -> list[str]:
    """Run the three submissions; return the lines that say what waited longer than a shard
    (empty when nothing did), after printing every measurement."""
    wait_for(lambda: all(_ready(service) for service in services), timeout=300,
             what="the worker and its control consumer to be ready", services=services)  # fmt: skip
    client = Celery("certbench-api-client")
    client.conf.update(celery_config(settings))
    try:
        ids = [_submit(settings, client, folder, seed) for seed in range(3)]
        wait_for(lambda: _all_ended(settings, ids), timeout=600,
                 what="three submissions to finish", services=services)  # fmt: skip
    finally:
        client.close()
    lines, late = [], []
    for sid in ids:
        times = _timeline(settings, sid)
        shard = times.shard_seconds
        waited = (times.validating - times.created).total_seconds()
        shown = (times.finished - times.last_shard).total_seconds()
        lines.append(
            f"submission {sid}: validation began {waited:.1f} s ({waited / shard:.2f} shards) "
            f"after submitting; on the board {shown:.1f} s ({shown / shard:.2f} shards) after "
            f"its last shard (shard {shard:.1f} s)"
        )
        if waited > shard:
            late.append(f"validation of {sid}")
        if shown > shard:
            late.append(f"entry of {sid}")
    print("\n".join(lines))
    return [f"waited longer than one shard: {late}", *lines] if late else []


def _ready(worker: Service) -> bool:
    """Whether the worker's log says both its nodes (the worker, its control consumer) are
    ready: measured from then on, a validation's wait is the queue's, not the start-up's."""
    text = worker.log.read_text(errors="replace") if worker.log.exists() else ""
    return text.count(" ready.") >= READY_NODES


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


def _all_ended(settings: Settings, ids: list[int]) -> bool:
    with session_scope(settings) as session:
        states = [session.get_one(Submission, sid) for sid in ids]
        for submission in states:
            if submission.state in (SubmissionState.FAILED, SubmissionState.REJECTED):
                raise AssertionError(f"{submission.id} {submission.state}: {submission.message}")
        return all(s.state == SubmissionState.FINISHED for s in states)


@dataclass(frozen=True)
class Timeline:
    """When a submission was made, began validating, recorded its last shard and finished, and
    its slow shards' median duration."""

    created: datetime
    validating: datetime
    last_shard: datetime
    finished: datetime
    shard_seconds: float


def _timeline(settings: Settings, sid: int) -> Timeline:
    with session_scope(settings) as session:
        submission = session.get_one(Submission, sid)
        shards = session.scalars(select(StageShard).where(StageShard.submission_id == sid)).all()
        validating = session.scalar(
            select(SubmissionEvent.at).where(
                SubmissionEvent.submission_id == sid,
                SubmissionEvent.to_state == SubmissionState.VALIDATING,
            )
        )
        assert validating is not None and submission.finished_at is not None
        return Timeline(
            created=submission.created_at,
            validating=validating,
            last_shard=max(s.created_at for s in shards),
            finished=submission.finished_at,
            shard_seconds=statistics.median(
                s.seconds for s in shards if s.stage in slow_stages.NAMES
            ),
        )
