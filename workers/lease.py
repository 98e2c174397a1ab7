"""Keeping a submission's lease alive while a long shard runs, reporting its progress, and
noticing when it must stop, and why.

A shard can run for minutes inside one ``certify`` or ``robust_accuracy`` call, so the lease is
renewed by a background thread every ``heartbeat_seconds`` rather than by that loop. The stage's
progress callback (per record, per attacked batch) lands in ``on_progress``: at most every
``cancel_check_seconds`` it checks the submission's state and writes the shard's images and
forward passes so far to its dispatch row (``models.runs.progress.record_partial``: what the
progress, throughput and ETA views read). Once the submission stopped wanting the shard it raises
``ShardCancelled`` naming why: cancelled, failed (the watchdog gave up on it, or another shard
failed it), finished elsewhere, or taken over by another worker after this one's claim lapsed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from models.core.settings import Settings
from models.db.engine import session_scope
from models.db.entities import ShardDispatch, StageShard, Submission
from models.db.states import Reason, SubmissionState
from models.runs import progress, shards
from models.submissions import lifecycle as pipeline
from workers.errors import ShardCancelled

log = logging.getLogger(__name__)
S = SubmissionState
Key = tuple[str, str, int]


class ShardLease:
    """Context manager: heartbeat thread + progress/cancel callback for one running shard.

    ``lost`` is set once the submission no longer holds a lease (or this worker no longer holds
    the shard's claim); ``on_progress`` then raises ``ShardCancelled`` with the reason.
    ``samples(done)`` gives the forward passes of the shard's first ``done`` images (the stage's
    estimate); ``done`` is the images finished so far.
    """

    def __init__(
        self,
        settings: Settings,
        submission_id: int,
        *,
        worker: str,
        shard_images: int,
        cancel_check_seconds: float,
        shard_key: Key | None = None,
        samples: Callable[[int], int] | None = None,
    ) -> None:
        self.settings = settings
        self.submission_id = submission_id
        self.worker = worker
        self.shard_images = max(1, shard_images)
        self.cancel_check_seconds = cancel_check_seconds
        self.shard_key = shard_key
        self.samples = samples or (lambda done: 0)
        self.lost = threading.Event()
        self.beats = 0
        self.done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name=f"lease-{submission_id}", daemon=True
        )
        self._last_check = time.monotonic()

    def __enter__(self) -> ShardLease:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(self.settings.heartbeat_seconds):
            try:
                with session_scope(self.settings) as session:
                    alive = pipeline.heartbeat(
                        session, self.submission_id, settings=self.settings, worker=self.worker
                    )
                    if alive and self.shard_key is not None:
                        # The reconciler gave the shard to another worker after our claim
                        # lapsed (a stalled process): stop rather than compute it twice.
                        alive = shards.renew_claim(
                            session,
                            self.submission_id,
                            self.shard_key,
                            worker=self.worker,
                            settings=self.settings,
                        )
            except SQLAlchemyError as err:
                # A database hiccup must not kill the shard; the lease has slack for a missed beat.
                log.warning("heartbeat for submission %s failed: %s", self.submission_id, err)
                continue
            self.beats += 1
            if not alive:
                self.lost.set()
                return

    def on_record(self, _record: object) -> None:
        """A per-record callback: one more image done."""
        self.on_progress(self.done + 1)

    def on_progress(self, done: int) -> None:
        """``done`` images of the shard finished: every few seconds check the state and write
        the shard's progress; raises ShardCancelled once the shard is no longer wanted."""
        self.done = done
        if self.lost.is_set():
            raise self.stopped()
        now = time.monotonic()
        if now - self._last_check < self.cancel_check_seconds:
            return
        self._last_check = now
        if not self._still_running():
            self.lost.set()
            raise self.stopped()

    def _still_running(self) -> bool:
        """One round trip: write the shard's counts iff the submission still runs."""
        with session_scope(self.settings) as session:
            state = session.scalar(
                select(Submission.state).where(Submission.id == self.submission_id)
            )
            if state != S.RUNNING:
                return False
            if self.shard_key is not None:
                progress.record_partial(
                    session,
                    self.submission_id,
                    self.shard_key,
                    worker=self.worker,
                    images=self.done,
                    samples=self.samples(self.done),
                    settings=self.settings,
                )
            return True

    def stopped(self) -> ShardCancelled:
        """The error to stop with, saying why (read from the database)."""
        try:
            with session_scope(self.settings) as session:
                outcome, why = stop_reason(session, self.submission_id, self.shard_key)
        except SQLAlchemyError as err:
            outcome = "stopped"
            why = f"submission {self.submission_id} no longer holds a lease ({err})"
        return ShardCancelled(why, outcome=outcome)


def stop_reason(session: Session, submission_id: int, key: Key | None) -> tuple[str, str]:
    """(outcome, sentence) for a shard whose lease or claim is gone (see ``ShardCancelled``)."""
    submission = session.get(Submission, submission_id, populate_existing=True)
    if submission is None:
        return "stopped", f"submission {submission_id} no longer exists"
    state, detail = submission.state, submission.message or submission.reason or ""
    if state == S.CANCELLED:
        return "cancelled", f"submission {submission_id} was cancelled ({detail})"
    if state == S.FAILED:
        by = "the watchdog" if submission.reason == Reason.LEASE_EXPIRED else "a worker"
        return "failed", (
            f"submission {submission_id} was failed by {by} ({submission.reason}: {detail})"
        )  # fmt: skip
    if state == S.FINISHED:
        return "finished_elsewhere", f"submission {submission_id} was finished by another worker"
    if state == S.RUNNING and key is not None:
        return _claim_lost(session, submission_id, key)
    return "stopped", f"submission {submission_id} is {state} (no longer running)"


def _claim_lost(session: Session, submission_id: int, key: Key) -> tuple[str, str]:
    """The submission runs, but this worker's claim on the shard lapsed: who has it now."""
    stage, unit, index = key
    where = (
        (StageShard.submission_id == submission_id)
        & (StageShard.stage == stage)
        & (StageShard.unit == unit)
        & (StageShard.shard_index == index)
    )
    recorder = session.execute(select(StageShard.worker).where(where)).first()
    if recorder is not None:
        return "finished_elsewhere", f"the shard was recorded by {recorder[0] or 'another worker'}"
    row = session.get(ShardDispatch, (submission_id, *key), populate_existing=True)
    holder = row.claimed_by if row is not None and row.claimed_by else "no worker yet"
    return "taken_over", (
        f"this worker's claim on the shard lapsed and the reconciler gave it to {holder}"
    )  # fmt: skip
