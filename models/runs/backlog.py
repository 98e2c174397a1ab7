"""The queue ahead of a submission: the work its shards wait behind (issue 34 §1).

Each stage's queue is first in, first out, and a submission's shards are queued when it is
validated, so every active submission made before it (by id) has its remaining shards in front
of its own. ``models.runs.progress`` adds their time to the ETA: each one's remaining forward
passes per stage at its own measured rate (running shards, else recorded ones), else this fleet's
rate for the stage, divided by the workers holding a live shard claim now, since they drain the
queues side by side (at least one: an idle fleet still has a worker to start it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models.db.entities import ShardDispatch
from models.runs.estimates import Rate


@dataclass(frozen=True)
class Remaining:
    """One submission's remaining work: forward passes and seconds at one worker (NaN when a
    stage with work left was never measured)."""

    submission_id: int
    forward_passes: int
    seconds: float


@dataclass(frozen=True)
class QueueAhead:
    """Active submissions made before one: how many, their remaining forward passes, and the
    seconds those take on the workers busy now (None when a stage with work left was never
    measured on this fleet)."""

    submissions: int
    forward_passes: int
    seconds: float | None
    workers: int

    def describe(self) -> str:
        if not self.submissions:
            return "no submission ahead in the queue"
        what = (
            f"{self.submissions} submission(s) ahead in the queue with "
            f"{self.forward_passes:,} forward passes left"
        )
        if self.seconds is None:
            return what + " (a stage of theirs was never measured on this fleet)"
        return what + f" ({self.seconds:,.0f} s on {self.workers} busy worker(s))"


def remaining(
    submission_id: int,
    stages: Sequence[tuple[str, int, Rate | None]],
    fleet: Mapping[str, Rate],
) -> Remaining:
    """A submission's remaining work from its stages' (name, forward passes left, own rate)."""
    passes, seconds = 0, 0.0
    for stage, left, own in stages:
        if left <= 0:
            continue
        rate = own or fleet.get(stage)
        passes += left
        seconds += math.nan if rate is None else left / rate.samples_per_second
    return Remaining(submission_id, passes, seconds)


def ahead_of(ids: Sequence[int], left: Sequence[Remaining], workers: int) -> dict[int, QueueAhead]:
    """For each of ``ids``, the queue ahead of it: the ``left`` work of the smaller ids."""
    workers = max(1, workers)
    ahead = {}
    for submission_id in ids:
        before = [r for r in left if r.submission_id < submission_id]
        total = sum(r.seconds for r in before)
        ahead[submission_id] = QueueAhead(
            submissions=len(before),
            forward_passes=sum(r.forward_passes for r in before),
            seconds=None if math.isnan(total) else total / workers,
            workers=workers,
        )
    return ahead


def busy_workers(session: Session, now: datetime) -> int:
    """Distinct workers (node/process) holding a live shard claim now."""
    count = session.scalar(
        select(func.count(func.distinct(ShardDispatch.claimed_by))).where(
            ShardDispatch.claimed_by.is_not(None), ShardDispatch.claimed_until >= now
        )
    )
    return count or 0
