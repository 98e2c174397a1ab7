"""How the API and the workers reach the same Celery broker, without importing each other.

The API sends tasks by *name* through a client app built from ``celery_config(settings)``; the
workers build their app from the same function (adding worker-only keys) and register tasks under
the names below. With no ``CERTBENCH_BROKER_URL`` the broker is kombu's SQLAlchemy transport on
``<data_dir>/broker.sqlite`` (the "embedded" mode: no server to install; a separate file from the
app database, so Alembic never sees kombu's tables). Otherwise e.g. ``redis://host:6379/0``.

Why SQL and not kombu's filesystem transport: that one can hand a consumer a half-written message
file and, across filesystems, give one message to two consumers; the SQL transport claims a message
inside one transaction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from models.core.settings import Settings

#: Validate a submission (safe load, dummy forward, output check); args: [submission_id].
TASK_VALIDATE = "certbench.validate"
#: Merge shard records and finish; args: [submission_id] (sent by the workers).
TASK_AGGREGATE = "certbench.aggregate"
#: Long GPU work (certify shards).
DEFAULT_QUEUE = "certbench"
#: Short tasks (validate, aggregate), so uploads never wait behind hours of shards.
CONTROL_QUEUE = "certbench.control"


def embedded_broker_path(settings: Settings) -> Path:
    """SQLite file of the embedded broker."""
    return (settings.data_dir / "broker.sqlite").resolve()


def celery_config(settings: Settings) -> dict[str, Any]:
    """Celery settings shared by the API's client and the workers (JSON messages only)."""
    config: dict[str, Any] = {
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_serializer": "json",
        "task_ignore_result": True,
        "task_default_queue": DEFAULT_QUEUE,
        "task_routes": {
            TASK_VALIDATE: {"queue": CONTROL_QUEUE},
            TASK_AGGREGATE: {"queue": CONTROL_QUEUE},
        },
        "broker_connection_retry_on_startup": True,
        "timezone": "UTC",
        "enable_utc": True,
    }
    if settings.broker_url is None:
        config["broker_url"] = f"sqla+sqlite:///{embedded_broker_path(settings)}"
        config["broker_transport_options"] = {"connect_args": {"timeout": 30}}
    else:
        config["broker_url"] = settings.broker_url
        config["broker_transport_options"] = {
            "visibility_timeout": settings.visibility_timeout_seconds,
            **broker_timeouts(settings.broker_timeout_seconds),
        }
        config["broker_connection_timeout"] = settings.broker_timeout_seconds
    return config


def broker_timeouts(seconds: int) -> dict[str, Any]:
    """Redis transport options bounding every wait on the broker's link (kombu's redis
    transport): connecting and each command's reply (``socket_timeout``: without it a publish on
    a link that went silent, a partition, waits forever), TCP keepalives, and kombu's check of
    the consumer's blocking read every ``seconds`` (a read with no reply for its server-side
    timeout plus that long is dropped and reconnected)."""
    return {
        "socket_timeout": seconds,
        "socket_connect_timeout": seconds,
        "socket_keepalive": True,
        "health_check_interval": seconds,
    }


def ensure_embedded_queue(settings: Settings) -> None:
    """Create the folder of the embedded broker file (kombu creates its tables itself)."""
    if settings.broker_url is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)


def prepare_embedded_broker(settings: Settings) -> None:
    """Create the embedded transport's tables and the control queue once, before several
    processes share the file: kombu creates them on first use, and two API processes doing that
    at once collide (``table already exists``, a duplicate queue row). No-op with a broker URL."""
    if settings.broker_url is not None:
        return
    from kombu import Connection

    ensure_embedded_queue(settings)
    config = celery_config(settings)
    with Connection(
        config["broker_url"], transport_options=config["broker_transport_options"]
    ) as connection:
        connection.SimpleQueue(CONTROL_QUEUE).close()
