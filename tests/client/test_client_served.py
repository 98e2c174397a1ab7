"""The installed ``certbench`` command as a researcher runs it, against ``certbench serve`` with
nothing configured (SQLite, the embedded worker really certifying): login, ``submit --wait``
through to the results table, ``results --json``, ``download``, and ``certbench.zoo.load_model``
giving back the very model that was submitted."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workers"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from flow import free_port, put_benchmark, settings_from_env
from processes import BIN, Service, service_env, wait_for
from support import TEST_SETS, manifest, tiny_model, weights_bytes

import migrations
from certbench.zoo import load_model
from models import accounts
from models.db import dispose_engines, session_scope
from models.entities import Role

pytestmark = pytest.mark.slow

SERVE_ENV = {
    "CERTBENCH_SHARD_SIZE": "1",
    "CERTBENCH_WORKER_DEVICE": "cpu",
    "CERTBENCH_HEARTBEAT_SECONDS": "2",
    "CERTBENCH_WATCHDOG_INTERVAL_SECONDS": "5",
}


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/health", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def _certbench(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The console script, with its config and cache under ``home`` and no CERTBENCH_* set."""
    env = service_env(
        XDG_CONFIG_HOME=str(home / "config"), XDG_CACHE_HOME=str(home / "cache"), COLUMNS="200"
    )
    return subprocess.run(
        [str(BIN / "certbench"), *args], env=env, capture_output=True, text=True, timeout=600
    )


def test_a_researcher_submits_waits_and_loads_the_model_back(tmp_path: Path):
    env = service_env(CERTBENCH_DATA_DIR=str(tmp_path / "data"), **SERVE_ENV)
    settings = settings_from_env(env)
    migrations.upgrade(settings)
    with session_scope(settings) as session:
        root = accounts.create_user(session, name="root", role=Role.ADMIN)
        secret = accounts.create_token(session, user=root).secret
    dispose_engines()
    port = free_port()
    serve = Service(
        [str(BIN / "certbench"), "serve", "--host", "127.0.0.1", "--port", str(port),
         "--no-load-benchmarks", "--workers", "1"],
        env,
        tmp_path / "serve.log",
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    home = tmp_path / "home"
    try:
        wait_for(lambda: _answers(base), timeout=300, what="certbench serve", services=(serve,))
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {secret}"}) as admin:
            put_benchmark(admin, tmp_path / "dataset")
            user = admin.post("/api/v1/admin/users", json={"name": "erin"}).json()
            token = admin.post(f"/api/v1/admin/users/{user['id']}/tokens", json={}).json()["token"]
        model = tiny_model(seed=2)
        weights = tmp_path / "upload" / "resnet20.safetensors"
        weights.write_bytes(weights_bytes(model, tmp_path / "upload"))
        manifest_path = tmp_path / "upload" / "manifest.json"
        manifest_path.write_text(json.dumps(manifest()))

        logged = _certbench(home, "login", "--server", base, "--token", token)
        assert logged.returncode == 0, logged.stderr
        submitted = _certbench(
            home, "submit", "--weights", str(weights), "--manifest", str(manifest_path), "--wait",
            "--public-weights", "--license", "CC-BY-4.0",
        )  # fmt: skip
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        assert "uploading resnet20.safetensors" in submitted.stderr
        entry = int(re.search(r"submission (\d+): finished", submitted.stderr).group(1))
        for text in (*TEST_SETS, "ACR", "mean ACR"):
            assert text in submitted.stdout

        results = _certbench(home, "results", str(entry), "--json")
        assert results.returncode == 0, results.stderr
        document = json.loads(results.stdout)
        assert document["state"] == "finished" and len(document["results"]) == len(TEST_SETS)
        assert document["weights"]["license"] == "CC-BY-4.0"

        fetched = _certbench(home, "download", str(entry), "--out", str(tmp_path / "zoo"))
        assert fetched.returncode == 0, fetched.stderr
        saved = tmp_path / "zoo" / f"tiny-entry-{entry}.safetensors"
        assert saved.read_bytes() == weights.read_bytes()

        loaded = load_model("tiny", entry, server=base)
        images = torch.rand((3, 3, 32, 32), generator=torch.Generator().manual_seed(0))
        model.eval()
        with torch.no_grad():
            assert torch.equal(loaded(images), model(images))
    finally:
        os.kill(serve.pid, signal.SIGINT)
        serve.process.wait(timeout=120)
        serve.stop()
