"""The watchdog: reconcile the database with the work in flight (``models.runs.reconcile``).

Shards whose worker stopped heartbeating, and work whose message the broker lost, are sent again;
a shard that lost ``max_shard_attempts`` workers fails its submission with their history.

Every worker pool process runs a sweep on a daemon thread every
``CERTBENCH_WATCHDOG_INTERVAL_SECONDS`` (no separate beat process to deploy); the
``certbench.watchdog`` task does the same sweep for a deployment that prefers ``celery beat``.
Sweeps are idempotent: the failing UPDATE re-checks the lease, so concurrent sweeps from several
workers, or a heartbeat landing in between, are safe.
"""

from __future__ import annotations

import logging
import threading

from celery import Celery
from sqlalchemy.exc import SQLAlchemyError

from models.core.settings import Settings
from models.db.engine import session_scope
from models.runs.reconcile import Actions, reconcile
from models.stages import registry
from models.submissions import artifacts
from workers.names import AGGREGATE, CONTROL_QUEUE, RUN_SHARD, VALIDATE

log = logging.getLogger(__name__)


def sweep(settings: Settings, app: Celery) -> list[int]:
    """One reconciliation: re-send what the database says nothing runs, through ``app`` (returns
    the ids of the submissions failed: a shard that kept losing its worker); remove stale partial
    weights files. The Celery app is passed in, so this module never imports ``workers.app``
    (which starts the watchdog)."""
    artifacts.remove_stale_partials(settings, older_than=settings.partial_upload_grace_seconds)
    with session_scope(settings) as session:
        actions = reconcile(session, settings=settings)
    send(actions, app)
    for submission_id in actions.failed:
        log.warning("watchdog: submission %s failed, a shard kept losing its worker", submission_id)
    return actions.failed


def send(actions: Actions, app: Celery) -> None:
    """Send the reconciler's messages (the rows say they were sent before this runs, so a broker
    that is down now only delays them until the next sweep after ``reconcile_after``)."""
    for submission_id in actions.validate:
        app.send_task(VALIDATE, args=[submission_id], queue=CONTROL_QUEUE)
    for submission_id, spec in actions.shards:
        log.warning(
            "watchdog: re-sending %s shard %s of %r for submission %s",
            spec.stage, spec.shard_index, spec.unit, submission_id,
        )  # fmt: skip
        app.send_task(
            RUN_SHARD,
            args=[submission_id, spec.stage, spec.unit, spec.shard_index],
            queue=registry.get(spec.stage).queue,
        )
    for submission_id in actions.aggregate:
        app.send_task(AGGREGATE, args=[submission_id], queue=CONTROL_QUEUE)


class WatchdogThread(threading.Thread):
    """Daemon thread sweeping every ``interval`` seconds until ``stop()``."""

    def __init__(self, app: Celery, settings: Settings, interval: float) -> None:
        super().__init__(name="certbench-watchdog", daemon=True)
        self.app = app
        self.settings = settings
        self.interval = interval
        self.sweeps = 0
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                sweep(self.settings, self.app)
            except SQLAlchemyError as err:
                # The database may be briefly unreachable; the next sweep tries again.
                log.warning("watchdog sweep failed: %s", err)
            self.sweeps += 1
            self._stopped.wait(self.interval)

    def stop(self) -> None:
        self._stopped.set()
        self.join()
