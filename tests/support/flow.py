"""Steps the end-to-end tests share: settings of a process env, a free port, loading the tiny
benchmark over HTTP, submitting, waiting for a state."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any, Protocol

import httpx

from models.core.settings import Settings
from tests.support.processes import Service, wait_for
from tests.support.workers import (
    tiny_definition,
    tiny_robustness,
    write_tiny_dataset,
    write_tiny_train_split,
)


def settings_from_env(env: dict[str, str]) -> Settings:
    """The Settings a process started with ``env`` reads."""
    values = {k.removeprefix("CERTBENCH_").lower(): v for k, v in env.items()}
    return Settings(**{k: v for k, v in values.items() if k in Settings.model_fields})


def free_port() -> int:
    """A TCP port nobody listens on right now (for the API process)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


TERMINAL = {"finished", "failed", "rejected", "cancelled", "duplicate"}


class HasAdmin(Protocol):
    """What ``put_benchmark`` needs of a running stack (``tests.support.e2e.Stack``)."""

    admin: httpx.Client
    settings: Settings


def put_benchmark(
    stack: HasAdmin,
    folder: str,
    *,
    robustness: bool = False,
    stages: dict[str, Any] | None = None,
    **protocol: Any,
) -> dict[str, Any]:
    """Write the tiny dataset in the stack's data directory (``CERTBENCH_DATASETS_DIR``) under
    ``folder`` and load its definition through the admin API (``robustness``: with a training
    split and the tiny robustness stage; ``stages``: further stage blocks).

    The API takes only folders relative to the data directory (``models.benchmarks.folders``):
    the request names them so; the definition returned names them absolute, as the tests read
    the images themselves."""
    assert stack.settings.datasets_dir is not None  # filled by Settings
    datasets_dir = stack.settings.datasets_dir
    dataset = write_tiny_dataset(datasets_dir / folder)
    stage = tiny_robustness(write_tiny_train_split(dataset)) if robustness else None
    definition = tiny_definition(dataset, robustness=stage, **protocol)
    if stages:
        definition["stages"] = {**definition.get("stages", {}), **stages}
    response = stack.admin.put(
        "/api/v1/admin/benchmarks", json=_relative_folders(definition, datasets_dir)
    )
    assert response.status_code == 200, response.text
    return definition


def _relative_folders(value: Any, root: Path) -> Any:
    """``value`` with every ``folder`` under ``root`` written relative to it."""
    if isinstance(value, dict):
        return {
            key: (
                str(Path(item).relative_to(root))
                if key == "folder" and isinstance(item, str) and Path(item).is_relative_to(root)
                else _relative_folders(item, root)
            )
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_relative_folders(item, root) for item in value]
    return value


def submit(
    client: httpx.Client, weights: bytes, manifest: dict[str, Any] | bytes
) -> httpx.Response:
    """POST a multipart submission (weights + JSON manifest)."""
    body = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
    return client.post(
        "/api/v1/submissions",
        files={
            "weights": ("model.safetensors", weights, "application/octet-stream"),
            "manifest": ("manifest.json", body, "application/json"),
        },
    )


def wait_state(
    client: httpx.Client,
    submission_id: int,
    states: set[str],
    *,
    services: tuple[Service, ...],
    timeout: float = 400,
) -> dict[str, Any]:
    """Poll GET /submissions/{id} until its state is in ``states``; fail on another end state
    (``timeout``: seconds on the reference machine, scaled by ``wait_for``)."""

    def probe() -> dict[str, Any] | None:
        body = client.get(f"/api/v1/submissions/{submission_id}").json()
        if body["state"] in states:
            return body
        if body["state"] in TERMINAL:
            raise AssertionError(
                f"submission {submission_id} ended {body['state']} ({body['reason']}): "
                f"{body['message']}"
            )
        return None

    return wait_for(
        probe, timeout=timeout, what=f"submission {submission_id} to be {states}", services=services
    )
