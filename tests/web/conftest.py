"""Fixtures for the web tests: one seeded SQLite service database per session, the app served by
uvicorn in a subprocess on 127.0.0.1, and real headless Chromium driven by Playwright.

Chromium is Debian's ``chromium`` package (``apt-get install -y chromium``); Playwright's own
browser download is never used. If the binary is missing, the browser tests FAIL with that
instruction: they are never skipped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

import migrations
from api.main import create_app
from models.core.settings import Settings
from models.db.engine import dispose_engines, session_scope
from tests.support import timing
from tests.support.web import (
    REPO,
    SERVER_START_SECONDS,
    Site,
    free_port,
    scale_waits,
)
from tests.support.web_seed import seed_database


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A migrated SQLite database seeded through the service layer (see ``web_seed.py``)."""
    data_dir = tmp_path_factory.mktemp("web") / "data"
    settings = Settings(data_dir=data_dir, environment="test")
    migrations.upgrade(settings)
    with session_scope(settings) as session:
        seeded = seed_database(session, settings, data_dir.parent / "dataset")
    yield Site(settings, seeded, data_dir)
    dispose_engines()


@pytest.fixture(scope="session")
def client(site: Site) -> Iterator[TestClient]:
    with TestClient(create_app(site.settings)) as test_client:
        yield test_client


@pytest.fixture(scope="session")
def server(site: Site) -> Iterator[str]:
    """uvicorn serving the app on a free loopback port; yields its base URL."""
    port = free_port()
    env = {**os.environ, "CERTBENCH_DATA_DIR": str(site.data_dir), "CERTBENCH_ENVIRONMENT": "test"}
    env.pop("CERTBENCH_DATABASE_URL", None)
    env.pop("CERTBENCH_BROKER_URL", None)
    log = (site.data_dir.parent / "uvicorn.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "api.main:create_app",
            "--factory",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    base = f"http://127.0.0.1:{port}"
    start_limit = timing.seconds(SERVER_START_SECONDS)
    deadline = time.monotonic() + start_limit
    while True:
        if process.poll() is not None:
            log.close()
            pytest.fail(
                f"uvicorn exited with {process.returncode}:\n"
                + (site.data_dir.parent / "uvicorn.log").read_text()
            )
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass  # not listening yet
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"uvicorn did not answer /health within {start_limit:.0f} s")
        time.sleep(0.2)
    yield base
    process.terminate()
    try:
        process.wait(timeout=timing.seconds(10))
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()


@pytest.fixture
def console() -> list[str]:
    """Console errors and uncaught exceptions of the test's page (``page`` fails on any left)."""
    return []


@pytest.fixture
def page(browser: Any, server: str, console: list[str]) -> Iterator[Any]:
    """A fresh browser context and page; fails the test on any console error."""
    context = browser.new_context(base_url=server, viewport={"width": 1280, "height": 900})
    scale_waits(context)
    page = context.new_page()
    page.on("console", lambda msg: console.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: console.append(str(exc)))
    yield page
    context.close()
    assert not console, f"browser console errors: {console}"
