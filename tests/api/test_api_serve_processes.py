"""``certbench serve`` uses several API processes (issue 19 §9) on the embedded defaults: SQLite
and the embedded broker take concurrent uploads from every process, and start-up prepares what
the processes share (migrations, broker tables) and removes partial uploads a killed run left
(§7)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from api.commands import prepare_service
from models.core.queue import embedded_broker_path
from models.core.settings import Settings
from models.db.engine import dispose_engines, session_scope
from models.submissions.artifacts import INCOMING_DIR
from tests.support import timing
from tests.support.api import drain_validations
from tests.support.service_factories import make_user, manifest, weights_bytes

pytestmark = pytest.mark.memory(gib=1.25)

ADMIN = [sys.executable, "-c", "from certbench.cli.app import main; main()"]


def test_prepare_service_sweeps_partials_and_creates_the_broker(tmp_path: Path):
    settings = Settings(data_dir=tmp_path / "data", environment="test")
    incoming = settings.artifacts_dir / INCOMING_DIR
    incoming.mkdir(parents=True)
    stale = incoming / ".upload-killed.tmp"
    stale.write_bytes(b"\0" * 4096)
    old = time.time() - settings.partial_upload_grace_seconds - 1
    os.utime(stale, (old, old))
    try:
        prepare_service(settings, load_benchmarks=False)
    finally:
        dispose_engines()
    assert not stale.exists()
    assert embedded_broker_path(settings).is_file()


def _children(pid: int) -> list[str]:
    """Command lines of the direct children of ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            found.append(command)
    return found


@pytest.mark.slow
def test_serve_runs_several_api_processes_over_sqlite(tmp_path: Path):
    port = _free_port()
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CERTBENCH_")}
    # No reference entries: only this test's uploads are in the queue.
    env |= {"CERTBENCH_DATA_DIR": str(data), "CERTBENCH_PORT": str(port),
            "CERTBENCH_QUOTA_CONCURRENT": "50", "CERTBENCH_DEMO_REFERENCES": "false"}  # fmt: skip
    process = subprocess.Popen(
        [*ADMIN, "serve", "--workers", "2", "--no-worker"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(base, process, time.monotonic() + timing.seconds(240))
        spawned = [c for c in _children(process.pid) if "multiprocessing" in c]
        assert len(spawned) >= 2, _children(process.pid)
        settings = Settings(data_dir=data, environment="test")
        with session_scope(settings) as session:
            _, token = make_user(session, "alice")
        headers = {"Authorization": f"Bearer {token}"}

        def upload(i: int) -> int:
            files = {
                "weights": ("w.safetensors", weights_bytes(), "application/octet-stream"),
                "manifest": (
                    "m.json",
                    # the demo benchmark: its data is generated here (CIFAR-10's is not)
                    json.dumps(manifest(benchmark="demo-digits", sigma=0.5, name=f"model-{i}")),
                    "application/json",
                ),
            }
            with httpx.Client(timeout=timing.seconds(120)) as client:
                return client.post(
                    f"{base}/api/v1/submissions", headers=headers, files=files
                ).status_code

        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(upload, range(8)))
        assert statuses == [202] * 8
        queued = drain_validations(settings)
        assert sorted(queued) == list(range(1, 9))
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=timing.seconds(60))[0].decode(errors="replace")
        dispose_engines()
    assert "serving the API with 2 process(es)" in output


def _wait_ready(base: str, process: subprocess.Popen, deadline: float) -> None:
    while time.monotonic() < deadline:
        assert process.poll() is None, "certbench serve exited early"
        try:
            if httpx.get(f"{base}/ready", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1)
    raise AssertionError("certbench serve did not become ready in time")


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_default_is_every_cpu_available_up_to_the_cap(monkeypatch, tmp_path: Path):
    """``certbench serve`` runs one API process per CPU it may use (at most
    ``DEFAULT_MAX_API_WORKERS``) on SQLite and PostgreSQL alike; ``--workers`` and
    CERTBENCH_API_WORKERS override it."""
    from api import commands

    settings = Settings(data_dir=tmp_path, environment="test")
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1, 2}, raising=False)
    assert commands.api_processes(settings, None) == 3
    postgres = settings.model_copy(update={"database_url": "postgresql+psycopg://db/x"})
    assert commands.api_processes(postgres, None) == 3
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: set(range(64)), raising=False)
    assert commands.api_processes(settings, None) == commands.DEFAULT_MAX_API_WORKERS
    assert commands.api_processes(settings.model_copy(update={"api_workers": 2}), None) == 2
    assert commands.api_processes(settings, 5) == 5


def test_serve_gives_slow_processes_time_before_replacing_them(monkeypatch, tmp_path: Path):
    """uvicorn's supervisor kills an API process that does not answer its health check within
    ``timeout_worker_healthcheck`` (5 s by default): on a loaded machine that restarted the
    processes in a loop and the server never became ready. Serve passes a patient limit."""
    import uvicorn

    from api import commands

    ran: dict = {}
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: ran.update(kwargs))
    monkeypatch.setattr(commands, "prepare_service", lambda *args, **kwargs: None)
    settings = Settings(data_dir=tmp_path, environment="test", broker_url="redis://127.0.0.1:1/0")
    monkeypatch.setattr(commands, "_settings", lambda: settings)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1}, raising=False)
    commands.serve(host=None, port=None, workers=None, worker=False, load_benchmarks=False,
                   demo_references=False)  # fmt: skip
    assert ran["workers"] == 2
    assert ran["timeout_worker_healthcheck"] >= 30
