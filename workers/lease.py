"""Keeping a submission's lease alive while a long shard runs, and noticing cancellation.

A shard can run for minutes inside one ``certify`` or ``robust_accuracy`` call, so the lease is
renewed by a background thread every ``heartbeat_seconds`` rather than by that loop. Cancellation
is checked from its progress callback (per record, per attacked batch; at most every
``cancel_check_seconds``), which also writes the submission's fractional progress; the callback
raises ``ShardCancelled`` to stop the shard.
"""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType

from sqlalchemy import update
from sqlalchemy.exc import SQLAlchemyError

from models import pipeline, shards
from models.db import session_scope
from models.entities import Submission
from models.settings import Settings
from models.states import SubmissionState
from workers.errors import ShardCancelled

log = logging.getLogger(__name__)


class ShardLease:
    """Context manager: heartbeat thread + cancel/progress callback for one running shard.

    ``lost`` is set once the submission no longer holds a lease (cancelled, failed by the
    watchdog, finished elsewhere); ``on_progress`` then raises ``ShardCancelled``.
    """

    def __init__(
        self,
        settings: Settings,
        submission_id: int,
        *,
        worker: str,
        shard_images: int,
        cancel_check_seconds: float,
        shard_key: tuple[str, str, int] | None = None,
    ) -> None:
        self.settings = settings
        self.submission_id = submission_id
        self.worker = worker
        self.shard_images = max(1, shard_images)
        self.cancel_check_seconds = cancel_check_seconds
        self.shard_key = shard_key
        self.lost = threading.Event()
        self.beats = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name=f"lease-{submission_id}", daemon=True
        )
        self._done = 0
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
        self.on_progress(self._done + 1)

    def on_progress(self, done: int) -> None:
        """``done`` images of the shard finished: every few seconds check the state and write
        progress; raises ShardCancelled once the submission stopped running."""
        self._done = done
        if self.lost.is_set():
            raise ShardCancelled(f"submission {self.submission_id} lost its lease")
        now = time.monotonic()
        if now - self._last_check < self.cancel_check_seconds:
            return
        self._last_check = now
        if not self._still_running():
            self.lost.set()
            raise ShardCancelled(f"submission {self.submission_id} is no longer running")

    def _still_running(self) -> bool:
        """One round trip: bump progress iff still running; False means stop."""
        with session_scope(self.settings) as session:
            submission = session.get(Submission, self.submission_id)
            if submission is None or submission.state != SubmissionState.RUNNING:
                return False
            total = max(1, submission.shards_total)
            fraction = (submission.shards_done + self._done / self.shard_images) / total
            session.execute(
                update(Submission)
                .where(
                    Submission.id == self.submission_id,
                    Submission.state == SubmissionState.RUNNING,
                    Submission.progress < fraction,
                )
                .values(progress=min(fraction, 1.0))
                .execution_options(synchronize_session=False)
            )
            session.commit()
            return True
