"""The service's CLI: ``certbench db/benchmarks/admin`` (CliRunner) and ``certbench serve`` (a real
subprocess on loopback, with the embedded worker)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from certbench.cli.app import app, register_plugins
from models.catalog.benchmarks import get_benchmark, packaged_definitions, upsert_benchmark
from models.core.settings import Settings, get_settings
from models.db.accounts import authenticate
from models.db.engine import dispose_engines, session_scope
from tests.support import timing
from tests.support.service_factories import manifest, tiny_definition, weights_bytes

register_plugins(app)
runner = CliRunner()


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CERTBENCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("CERTBENCH_DATABASE_URL", raising=False)
    monkeypatch.delenv("CERTBENCH_BROKER_URL", raising=False)
    get_settings.cache_clear()
    yield tmp_path / "data"
    get_settings.cache_clear()
    dispose_engines()


def invoke(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_db_benchmarks_and_admin_commands(data_dir: Path, tmp_path: Path):
    invoke("db", "upgrade")
    definition = tmp_path / "tiny.json"
    definition.write_text(json.dumps(tiny_definition()))
    assert "tiny v1: 2 test sets, protocol test-v1" in invoke("benchmarks", "load", str(definition))
    assert "cifar10-c" in invoke("benchmarks", "load-packaged")
    assert "nothing new" in invoke("benchmarks", "load-packaged")
    listing = invoke("benchmarks", "list")
    assert "tiny\tv1\t2 test sets" in listing and "cifar100-f\tv5\t192 test sets" in listing
    secret = invoke("admin", "create-user", "root", "--role", "admin").strip().splitlines()[-1]
    second = invoke("admin", "create-token", "root", "--label", "ci").strip().splitlines()[-1]
    settings = Settings()
    with session_scope(settings) as session:
        assert authenticate(session, secret).name == "root"
        assert authenticate(session, second).role == "admin"
        assert len(get_benchmark(session, "tiny").test_sets) == 2
    assert "root\tadmin\tactive" in invoke("admin", "list-users")
    assert "revoked" in invoke("admin", "revoke-token", "1")


def test_packaged_definitions_replace_older_stored_versions(data_dir: Path):
    invoke("db", "upgrade")
    old = next(d for d in packaged_definitions() if d.name == "cifar10")
    old = old.model_copy(update={"version": 1, "stages": {}})
    settings = Settings()
    with session_scope(settings) as session:
        upsert_benchmark(session, old)  # what a database from before the robustness stage holds
    assert "cifar10," in invoke("benchmarks", "load-packaged") + ","
    with session_scope(settings) as session:
        stored = get_benchmark(session, "cifar10")
        assert stored.definition_version == 8  # v3 stages, v4/5 Fourier, v6/7 pins, v8 conventions
        assert stored.robustness["anchors"] == "cifar10_k50_s0.safetensors"
        (clean,) = stored.test_sets  # v7 pins the bytes: uoft-cs/cifar10 at its commit
        assert clean.provenance["hub_commit"] == "0b2714987fa478483af9968de7c934580d0bb9a2"
        assert clean.provenance["sha256"].startswith("841389e6f2d64f28")
    assert "nothing new" in invoke("benchmarks", "load-packaged")


def test_command_errors_exit_nonzero(data_dir: Path, tmp_path: Path):
    invoke("db", "upgrade")
    invoke("admin", "create-user", "alice")
    clash = runner.invoke(app, ["admin", "create-user", "alice"])
    assert clash.exit_code == 1 and "already taken" in clash.output
    missing = runner.invoke(app, ["admin", "create-token", "nobody"])
    assert missing.exit_code == 1 and "does not exist" in missing.output
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "certbench-benchmark/1", "name": "x"}')
    refused = runner.invoke(app, ["benchmarks", "load", str(bad)])
    assert refused.exit_code == 1 and "invalid benchmark definition" in refused.output


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _wait_ready(base: str, process: subprocess.Popen, deadline: float) -> dict:
    while time.monotonic() < deadline:
        assert process.poll() is None, "certbench serve exited early"
        try:
            response = httpx.get(f"{base}/ready", timeout=5)
            if response.status_code == 200:
                return response.json()
        except httpx.TransportError:
            pass
        time.sleep(1)
    raise AssertionError("certbench serve did not become ready in time")


@pytest.mark.slow
def test_serve_migrates_and_runs_the_embedded_worker(tmp_path: Path):
    """A fresh data dir: serve migrates, loads the packaged benchmarks, starts the embedded worker
    (which takes the validation job the API queued) and stops it on shutdown."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CERTBENCH_")}
    # no reference entries: the worker takes this test's job at once (the first-run e2e test
    # covers them, tests/e2e/test_e2e_first_run.py)
    env |= {
        "CERTBENCH_DATA_DIR": str(tmp_path / "data"),
        "CERTBENCH_PORT": str(port),
        "CERTBENCH_DEMO_REFERENCES": "false",
    }
    serve = [sys.executable, "-c", "from certbench.cli.app import main; main()", "serve"]
    process = subprocess.Popen(serve, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        ready = _wait_ready(base, process, time.monotonic() + timing.seconds(240))
        assert ready["embedded_broker"] is True and ready["migrations"] == "ok"
        names = [b["name"] for b in httpx.get(f"{base}/api/v1/benchmarks").json()]
        assert {"cifar10", "cifar10-c", "cifar100-f"} <= set(names)
        workers = _children(process.pid)
        assert workers, "no embedded worker process was started"
        admin = subprocess.run(
            [*serve[:-1], "admin", "create-user", "alice"],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        token = admin.stdout.strip().splitlines()[-1]
        headers = {"Authorization": f"Bearer {token}"}
        files = {
            "weights": ("w.safetensors", weights_bytes(), "application/octet-stream"),
            # the demo benchmark: its data is generated locally, CIFAR-10's is not here
            "manifest": (
                "m.json",
                json.dumps(manifest(benchmark="demo-digits", sigma=0.5)),
                "application/json",
            ),
        }
        created = httpx.post(
            f"{base}/api/v1/submissions", headers=headers, files=files, timeout=timing.seconds(60)
        )
        assert created.status_code == 202, created.text
        url = f"{base}/api/v1/submissions/{created.json()['id']}"
        deadline = time.monotonic() + timing.seconds(240)
        state = "submitted"
        while state == "submitted" and time.monotonic() < deadline:
            time.sleep(2)
            state = httpx.get(url, headers=headers, timeout=timing.seconds(10)).json()["state"]
        assert state != "submitted", "the embedded worker never picked up the validation job"
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=timing.seconds(60))[0].decode(errors="replace")
    assert "starting the embedded worker" in output
    time.sleep(timing.seconds(2))
    for pid in workers:
        assert (
            not Path(f"/proc/{pid}").exists()
            or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
        ), f"embedded worker {pid} outlived certbench serve"
