"""How the API and the workers reach the same Celery broker, without importing each other.

The API sends tasks by *name* through a client app built from ``celery_config(settings)``; the
workers build their app from the same function and register tasks under the names below. With no
``CERTBENCH_BROKER_URL`` the broker is kombu's filesystem transport in ``<data_dir>/queue`` (the
"embedded" mode: no server to install), otherwise e.g. ``redis://host:6379/0``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from models.settings import Settings

#: Validate a submission (safe load, dummy forward, output check); argument: submission id.
TASK_VALIDATE = "certbench.validate"
#: Queue name every certbench task uses unless the worker configuration routes them otherwise.
DEFAULT_QUEUE = "certbench"


def embedded_queue_dir(settings: Settings) -> Path:
    """Folder of the embedded filesystem broker (messages are small JSON files)."""
    return (settings.data_dir / "queue").resolve()


def celery_config(settings: Settings) -> dict[str, Any]:
    """Celery settings shared by the API's client and the workers (JSON messages only)."""
    config: dict[str, Any] = {
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_serializer": "json",
        "task_ignore_result": True,
        "task_default_queue": DEFAULT_QUEUE,
        "broker_connection_retry_on_startup": True,
        "timezone": "UTC",
        "enable_utc": True,
    }
    if settings.broker_url is None:
        folder = embedded_queue_dir(settings)
        config["broker_url"] = "filesystem://"
        config["broker_transport_options"] = {
            "data_folder_in": str(folder / "messages"),
            "data_folder_out": str(folder / "messages"),
            "control_folder": str(folder / "control"),
            "store_processed": False,
        }
    else:
        config["broker_url"] = settings.broker_url
        config["broker_transport_options"] = {
            "visibility_timeout": settings.visibility_timeout_seconds
        }
    return config


def ensure_embedded_queue(settings: Settings) -> None:
    """Create the embedded broker's folders (the filesystem transport does not)."""
    if settings.broker_url is None:
        folder = embedded_queue_dir(settings)
        for name in ("messages", "control"):
            (folder / name).mkdir(parents=True, exist_ok=True)
