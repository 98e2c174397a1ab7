"""The README's single-machine run: ``certbench serve`` with nothing configured.

No PostgreSQL, no Redis: SQLite under the data dir, and the embedded worker that ``serve`` starts
(``certbench worker --embedded`` over the SQLite message store) certifies a submission made over
HTTP. Stopping ``serve`` also stops its worker.
"""

from __future__ import annotations

import os
import signal

import httpx
import pytest
from flow import free_port, put_benchmark, settings_from_env, submit, wait_state
from processes import BIN, Service, service_env, wait_for
from support import TEST_SETS, manifest, tiny_model, weights_bytes

import migrations
from models import accounts
from models.db import dispose_engines, session_scope
from models.entities import Role

pytestmark = pytest.mark.slow

ENV = {
    "CERTBENCH_SHARD_SIZE": "1",
    "CERTBENCH_WORKER_DEVICE": "cpu",
    "CERTBENCH_HEARTBEAT_SECONDS": "2",
    "CERTBENCH_WATCHDOG_INTERVAL_SECONDS": "5",
}


def _children(pid: int) -> list[int]:
    path = f"/proc/{pid}/task/{pid}/children"
    with open(path) as handle:
        return [int(p) for p in handle.read().split()]


def _worker_children(pid: int) -> list[int]:
    """Children of ``pid`` running ``certbench worker`` (serve also starts API processes)."""
    out = []
    for child in _children(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
        except FileNotFoundError:
            continue
        if b"worker" in argv:
            out.append(child)
    return out


def test_serve_with_nothing_configured_certifies_a_submission(tmp_path):
    env = service_env(CERTBENCH_DATA_DIR=str(tmp_path / "data"), **ENV)
    settings = settings_from_env(env)
    assert settings.broker_url is None and settings.database_url.startswith("sqlite")
    migrations.upgrade(settings)
    with session_scope(settings) as session:
        root = accounts.create_user(session, name="root", role=Role.ADMIN)
        secret = accounts.create_token(session, user=root).secret
    dispose_engines()
    port = free_port()
    serve = Service(
        [str(BIN / "certbench"), "serve", "--host", "127.0.0.1", "--port", str(port),
         "--no-load-benchmarks"],
        env,
        tmp_path / "serve.log",
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    admin = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {secret}"}, timeout=60)
    worker_pids: list[int] = []
    try:
        wait_for(lambda: _answers(base), timeout=300, what="certbench serve", services=(serve,))
        worker_pids = _worker_children(serve.pid)
        assert len(worker_pids) == 1, "serve should start exactly one embedded worker"
        put_benchmark(admin, tmp_path / "dataset")
        user = admin.post("/api/v1/admin/users", json={"name": "erin"}).json()
        token = admin.post(f"/api/v1/admin/users/{user['id']}/tokens", json={}).json()["token"]
        erin = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        response = submit(erin, weights_bytes(tiny_model(seed=2), tmp_path), manifest())
        assert response.status_code == 202, response.text
        done = wait_state(erin, response.json()["id"], {"finished"}, services=(serve,))
        assert done["shards_done"] == 2 * len(TEST_SETS)
        results = erin.get(f"/api/v1/results/{done['id']}").json()["results"]
        assert sorted(r["test_set"] for r in results) == sorted(TEST_SETS)
        assert (tmp_path / "data" / "broker.sqlite").is_file()
        erin.close()
    finally:
        admin.close()
        os.kill(serve.pid, signal.SIGINT)  # what Ctrl-C does: uvicorn stops, then the worker
        serve.process.wait(timeout=120)
        serve.stop()
    for pid in worker_pids:
        assert not os.path.exists(f"/proc/{pid}") or _zombie(pid), f"worker {pid} outlived serve"


def _zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().split()[2] == "Z"


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/health", timeout=5).status_code == 200
    except httpx.TransportError:
        return False
