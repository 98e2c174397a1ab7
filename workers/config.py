"""Worker-only settings and the Celery configuration derived from them.

The shared ``models.settings.Settings`` holds what the API and the workers both read (database,
broker, data dir, lease, shard size, device). The knobs below only matter to a worker process. The
timing settings are checked against each other once, here, because their order is what makes a
crash recoverable:

    soft_time_limit < hard_time_limit < visibility_timeout < lease_seconds

- a shard that overruns gets ``SoftTimeLimitExceeded`` (fail with a clear reason), then SIGKILL;
- Redis re-delivers an unacknowledged shard only after ``visibility_timeout``, so it must exceed
  the longest possible shard (the hard limit) or a live shard would run twice;
- the watchdog fails a submission whose lease lapsed; the lease must outlive the visibility timeout
  so that a shard lost with a killed worker is re-delivered (and resumed) before the watchdog gives
  up on it.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from models.settings import Settings
from workers.errors import WorkerConfigError
from workers.names import AGGREGATE, CONTROL_QUEUE, QUEUE, VALIDATE

EMBEDDED_BROKER_FILE = "broker.sqlite"
"""Message store of the embedded transport, next to (not inside) the service database."""


class WorkerSettings(BaseSettings):
    """Worker process knobs; each can be set as ``CERTBENCH_<FIELD>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix="CERTBENCH_", env_file=None, extra="ignore")

    soft_time_limit: int = Field(default=600, gt=0)
    hard_time_limit: int = Field(default=660, gt=0)
    visibility_timeout: int = Field(default=780, gt=0)
    watchdog_seconds: float = Field(default=60.0, gt=0)
    cancel_check_seconds: float = Field(default=2.0, gt=0)
    certify_batch_size: int = Field(default=1000, gt=0)
    max_retries: int = Field(default=5, ge=0)


def check_timing(settings: Settings, worker: WorkerSettings) -> None:
    """Refuse timing settings whose order would lose or double-run shards (see module doc)."""
    chain = [
        ("CERTBENCH_SOFT_TIME_LIMIT", worker.soft_time_limit),
        ("CERTBENCH_HARD_TIME_LIMIT", worker.hard_time_limit),
        ("CERTBENCH_VISIBILITY_TIMEOUT", worker.visibility_timeout),
        ("CERTBENCH_LEASE_SECONDS", settings.lease_seconds),
    ]
    for (low_name, low), (high_name, high) in pairwise(chain):
        if low >= high:
            raise WorkerConfigError(
                f"{low_name}={low} must be smaller than {high_name}={high}: "
                "soft time limit < hard time limit < visibility timeout < lease. Raise the "
                "larger one or lower the smaller one."
            )
    if settings.heartbeat_seconds * 2 > settings.lease_seconds:
        raise WorkerConfigError(
            f"CERTBENCH_HEARTBEAT_SECONDS={settings.heartbeat_seconds} must be at most half of "
            f"CERTBENCH_LEASE_SECONDS={settings.lease_seconds}, or one late heartbeat would let "
            "the watchdog fail a healthy run"
        )


def embedded_broker_url(settings: Settings) -> str:
    """The kombu SQLAlchemy transport on a SQLite file under the data dir.

    Chosen over the filesystem transport because a message is claimed inside one SQLite
    ``BEGIN IMMEDIATE`` transaction (two processes can never take the same message), and because
    the URL alone configures it: the API process can publish with nothing but this string.
    """
    path = (settings.data_dir / EMBEDDED_BROKER_FILE).resolve()
    return f"sqla+sqlite:///{path}"


def broker_url(settings: Settings) -> str:
    """``CERTBENCH_BROKER_URL`` if configured, else the embedded transport."""
    return settings.broker_url or embedded_broker_url(settings)


def is_embedded(url: str) -> bool:
    """Whether ``url`` names the embedded (SQL) transport rather than a broker server."""
    return url.startswith(("sqla+", "sqlalchemy+"))


def celery_config(settings: Settings, worker: WorkerSettings) -> dict[str, Any]:
    """Celery settings for the broker in ``settings`` (Redis or the embedded transport)."""
    check_timing(settings, worker)
    url = broker_url(settings)
    embedded = is_embedded(url)
    if embedded:
        # Passed to sqlalchemy.create_engine: wait for the SQLite write lock instead of failing.
        transport_options: dict[str, Any] = {"connect_args": {"timeout": 30}}
    else:
        transport_options = {"visibility_timeout": worker.visibility_timeout}
    return {
        "broker_url": url,
        "broker_transport_options": transport_options,
        "broker_connection_retry_on_startup": True,
        "result_backend": None,
        "task_ignore_result": True,
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_default_queue": QUEUE,
        "task_routes": {VALIDATE: {"queue": CONTROL_QUEUE}, AGGREGATE: {"queue": CONTROL_QUEUE}},
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_soft_time_limit": worker.soft_time_limit,
        "task_time_limit": worker.hard_time_limit,
        "worker_prefetch_multiplier": 1,
        "worker_concurrency": 1,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        # The SQL transport has no fanout exchange, so broadcast remote control cannot work there.
        "worker_enable_remote_control": not embedded,
        "worker_send_task_events": False,
    }
