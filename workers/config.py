"""Worker-side Celery configuration, layered on the broker config the API uses too.

``models.core.queue.celery_config(settings)`` is the single source of truth for how the API and the
workers reach the broker (Redis, or the embedded transport when ``CERTBENCH_BROKER_URL`` is
unset). This module adds what only a consuming worker needs: late acks, requeue on worker loss,
prefetch 1, time limits, and, on the embedded transport, no broadcast remote control.

The timing settings live in ``models.core.settings.Settings`` (one environment for everything);
their order is what makes a crash recoverable:

    soft time limit < hard time limit < visibility timeout   (checked by Settings)
    2 × heartbeat <= lease                                   (checked here)

- a shard that overruns gets ``SoftTimeLimitExceeded`` (failed with a clear reason), then SIGKILL;
- Redis re-delivers an unacknowledged shard only after the visibility timeout, so it exceeds the
  longest possible shard (the hard limit) or a live shard would run twice;
- a shard's claim lapses ``lease_seconds`` after its worker's last heartbeat; the watchdog's
  reconciler (``models.runs.reconcile``) then sends the shard again, so a killed worker's run
  resumes after about the lease (900 s by default), not after the visibility timeout (7,200 s), and
  fails only after ``max_shard_attempts`` lost workers on one shard. The broker's own redelivery of
  the dead worker's message, later, finds the shard recorded or claimed and does nothing. So the
  defaults are consistent: lease < visibility timeout, and neither decides whether a run fails.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from models.core.queue import celery_config as broker_config
from models.core.settings import Settings
from models.stages.base import Stage
from workers.errors import WorkerConfigError

log = logging.getLogger(__name__)


class WorkerSettings(BaseSettings):
    """Knobs only a worker process reads; each can be set as ``CERTBENCH_<FIELD>``."""

    model_config = SettingsConfigDict(env_prefix="CERTBENCH_", env_file=None, extra="ignore")

    cancel_check_seconds: float = Field(default=2.0, gt=0)


def batch_size_for(stage: Stage) -> int:
    """A stage's batch size on this worker: its environment variable
    (``CERTBENCH_CERTIFY_BATCH_SIZE``, ``CERTBENCH_ROBUSTNESS_BATCH_SIZE``, or
    ``CERTBENCH_<STAGE>_BATCH_SIZE``), else the stage's default."""
    variable = stage.batch_size_variable()
    raw = os.environ.get(variable)
    if raw is None or raw == "":
        return stage.default_batch_size
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise WorkerConfigError(f"{variable}={raw!r} must be a positive whole number")
    return value


def check_timing(settings: Settings) -> None:
    """Refuse a heartbeat too slow for the lease, or a lease the reconciler cannot tell apart
    from a live shard."""
    if settings.heartbeat_seconds * 2 > settings.lease_seconds:
        raise WorkerConfigError(
            f"CERTBENCH_HEARTBEAT_SECONDS={settings.heartbeat_seconds} must be at most half of "
            f"CERTBENCH_LEASE_SECONDS={settings.lease_seconds}, or one late heartbeat would let "
            "the watchdog fail a healthy run"
        )
    if settings.reconcile_after_seconds < settings.heartbeat_seconds * 2:
        raise WorkerConfigError(
            f"CERTBENCH_RECONCILE_AFTER_SECONDS={settings.reconcile_after_seconds} must be at "
            f"least twice CERTBENCH_HEARTBEAT_SECONDS={settings.heartbeat_seconds}, or the "
            "reconciler would re-send work that is only between two heartbeats"
        )


def is_embedded(url: str) -> bool:
    """Whether ``url`` names an embedded transport rather than a broker server."""
    return url.startswith(("sqla+", "sqlalchemy+", "filesystem:"))


def restore_options(visibility_timeout: int) -> dict[str, int]:
    """Redis: sweep for expired unacknowledged messages every tenth of the visibility timeout.

    kombu's default sweep runs every ~100 s (interval 10 × throttle 10) whatever the timeout, so
    a shard lost with a killed worker could wait that much longer than the timeout promises.
    """
    return {
        "unacked_restore_interval": max(1, min(60, visibility_timeout // 10)),
        "unacked_restore_throttle": 1,
    }


def celery_config(settings: Settings) -> dict[str, Any]:
    """The full Celery configuration of a worker for ``settings``."""
    check_timing(settings)
    config = broker_config(settings)
    embedded = is_embedded(config["broker_url"])
    if not embedded:
        config["broker_transport_options"] = {
            **config["broker_transport_options"],
            **restore_options(settings.visibility_timeout_seconds),
        }
    config.update(
        {
            "task_acks_late": True,
            "task_reject_on_worker_lost": True,
            "task_soft_time_limit": settings.shard_soft_time_limit_seconds,
            "task_time_limit": settings.shard_time_limit_seconds,
            "worker_prefetch_multiplier": 1,
            "worker_concurrency": 1,
            "worker_cancel_long_running_tasks_on_connection_loss": True,
            # Broadcast remote control needs a fanout exchange the SQL transport does not have.
            "worker_enable_remote_control": not embedded,
            "worker_send_task_events": False,
        }
    )
    return config
