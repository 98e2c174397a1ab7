"""The watchdog: fail running submissions whose worker stopped renewing the lease.

Every worker pool process runs a sweep on a daemon thread every ``CERTBENCH_WATCHDOG_SECONDS``
(no separate beat process to deploy); the ``certbench.watchdog`` task does the same sweep for a
deployment that prefers ``celery beat``. Sweeps are idempotent: the failing UPDATE re-checks the
lease, so concurrent sweeps from several workers, or a heartbeat landing in between, are safe.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy.exc import SQLAlchemyError

from models import artifacts, pipeline
from models.db import session_scope
from models.settings import Settings

log = logging.getLogger(__name__)


def sweep(settings: Settings) -> list[int]:
    """Fail every submission whose lease expired (returns their ids); remove stale partial
    weights files."""
    artifacts.remove_stale_partials(settings, older_than=settings.partial_upload_grace_seconds)
    with session_scope(settings) as session:
        failed = pipeline.fail_expired_leases(session)
    for submission_id in failed:
        log.warning("watchdog: submission %s failed, its lease expired", submission_id)
    return failed


class WatchdogThread(threading.Thread):
    """Daemon thread sweeping every ``interval`` seconds until ``stop()``."""

    def __init__(self, settings: Settings, interval: float) -> None:
        super().__init__(name="certbench-watchdog", daemon=True)
        self.settings = settings
        self.interval = interval
        self.sweeps = 0
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                sweep(self.settings)
            except SQLAlchemyError as err:
                # The database may be briefly unreachable; the next sweep tries again.
                log.warning("watchdog sweep failed: %s", err)
            self.sweeps += 1
            self._stopped.wait(self.interval)

    def stop(self) -> None:
        self._stopped.set()
        self.join()
