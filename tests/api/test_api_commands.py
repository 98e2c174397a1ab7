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

from api import commands
from api.commands import WORKER_STOP_SECONDS
from certbench.cli.app import app, register_plugins
from models.catalog.benchmarks import get_benchmark, packaged_definitions, upsert_benchmark
from models.core.settings import Settings, get_settings
from models.db.accounts import authenticate
from models.db.engine import dispose_engines, session_scope
from tests.support import timing
from tests.support.service_factories import manifest, tiny_definition
from tests.support.workers import non_finite_model, weights_bytes

pytestmark = pytest.mark.memory(gib=1.5)

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


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid``: the embedded worker, its pool process, its control consumer
    and that one's pool process."""
    found, frontier = [], [pid]
    while frontier:
        children = [child for parent in frontier for child in _children(parent)]
        found += children
        frontier = children
    return found


def _running(pid: int) -> bool:
    """``pid`` exists and is not a zombie (a killed grandchild waits to be reaped by init)."""
    try:
        state = (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


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
    (which runs the validation job the API queued, rejecting NaN weights) and, on SIGTERM, stops
    it with every process below it before exiting itself.

    One API process: uvicorn then runs in serve's own process and re-raises SIGTERM once it has
    shut down, which killed serve before it stopped its worker (``api.commands._exit_on_sigterm``).
    Output goes to a file, not a pipe: a process left behind holding the pipe would make the
    wait on serve's exit wait on it too, and the check below is what should catch it.
    """
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
    log = tmp_path / "serve.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [*serve, "--workers", "1"], env=env, stdout=output, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"
    below: list[int] = []
    try:
        ready = _wait_ready(base, process, time.monotonic() + timing.seconds(240))
        assert ready["embedded_broker"] is True and ready["migrations"] == "ok"
        names = [b["name"] for b in httpx.get(f"{base}/api/v1/benchmarks").json()]
        assert {"cifar10", "cifar10-c", "cifar100-f"} <= set(names)
        assert _children(process.pid), "no embedded worker process was started"
        admin = subprocess.run(
            [*serve[:-1], "admin", "create-user", "alice"],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        token = admin.stdout.strip().splitlines()[-1]
        headers = {"Authorization": f"Bearer {token}"}
        # weights that validation rejects (NaN, as a diverged run leaves them): the worker runs
        # the validation job and nothing after it (a certification would go on until the
        # SIGTERM, and its warm shutdown wait for the running shard)
        weights = weights_bytes(non_finite_model(float("nan")), tmp_path / "nan")
        files = {
            "weights": ("w.safetensors", weights, "application/octet-stream"),
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
        body = {"state": "submitted"}
        while body["state"] in ("submitted", "validating") and time.monotonic() < deadline:
            time.sleep(1)
            body = httpx.get(url, headers=headers, timeout=timing.seconds(10)).json()
        assert body["state"] == "rejected", body
        assert body["reason"] == "non_finite_weights", body
        below = _descendants(process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            # the worker's warm shutdown, then its group killed (WORKER_STOP_SECONDS), and
            # uvicorn's own shutdown
            code = process.wait(timeout=timing.seconds(WORKER_STOP_SECONDS + 40))
        except subprocess.TimeoutExpired as err:
            process.kill()
            tail = log.read_text(errors="replace")[-3000:]
            raise AssertionError(f"serve outlived SIGTERM; log:\n{tail}") from err
    text = log.read_text(errors="replace")
    assert code == 0, text[-3000:]
    assert "serving the API with 1 process(es)" in text
    assert "starting the embedded worker" in text
    # the worker's pool process and control consumer: found, and gone with serve
    assert len(below) >= 2, below
    # a SIGKILL to the worker's group returns before its members have died: a few seconds
    deadline = time.monotonic() + timing.seconds(10)
    while (left := [pid for pid in below if _running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"processes of the embedded worker outlived certbench serve: {left}"


#: A stand-in for a worker whose warm shutdown outlasts serve's wait: it and its child (as a
#: pool process or control consumer would) ignore SIGTERM; the child's PID goes to stdout.
STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
print(child.pid, flush=True)
time.sleep(600)
"""


def test_a_worker_past_its_stop_deadline_is_killed_with_every_process_below_it(monkeypatch):
    """``serve``'s embedded worker runs in a process group of its own, so that a worker still
    running past WORKER_STOP_SECONDS is killed whole: killing its main process alone left its
    pool process and control consumer to finish their tasks after serve had exited."""
    monkeypatch.setattr(commands, "WORKER_STOP_SECONDS", 1)
    worker = commands._start_group([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE)
    assert worker.stdout is not None
    grandchild = int(worker.stdout.readline())
    assert _running(grandchild)
    commands._stop(worker)
    assert worker.returncode == -signal.SIGKILL
    deadline = time.monotonic() + timing.seconds(10)
    while _running(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(grandchild), "the worker's child outlived the kill"
