"""Fixtures for the client tests: the real app served by uvicorn on a free local port (a thread
of the test process; SQLite and the embedded broker), users with real tokens, the tiny benchmark,
and a helper that finishes a submission through the real pipeline functions (as a worker would,
with deterministic records) so results and leaderboard rows exist.

The client talks to the server over real TCP, exactly as it would to a deployment. The config
file and cache of the client live under the test's temporary folder, never the user's."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from api.main import create_app
from models.db.engine import session_scope
from models.db.entities import Role
from tests.support import timing
from tests.support.client import Live
from tests.support.service_db import MigratedTemplates, service_settings, templates
from tests.support.service_factories import (
    load_tiny,
    make_user,
)


@pytest.fixture(scope="session")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MigratedTemplates]:
    with templates(tmp_path_factory.mktemp("templates")) as cache:
        yield cache


@pytest.fixture(autouse=True)
def client_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The client's config and cache folders under tmp_path; no CERTBENCH_SERVER/TOKEN from
    the environment the tests run in."""
    home = tmp_path / "home"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    for name in ("CERTBENCH_SERVER", "CERTBENCH_TOKEN", "CERTBENCH_CONFIG", "CERTBENCH_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def live(tmp_path: Path, migrated: MigratedTemplates) -> Iterator[Live]:
    with service_settings("sqlite", tmp_path / "data", template=migrated) as settings:
        with session_scope(settings) as session:
            load_tiny(session)
            _, alice = make_user(session, "alice")
            _, bob = make_user(session, "bob")
            _, admin = make_user(session, "root", Role.ADMIN)
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        server = uvicorn.Server(
            uvicorn.Config(create_app(settings), log_level="warning", lifespan="on")
        )
        thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + timing.seconds(60)
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise AssertionError("the uvicorn server did not start")
            time.sleep(0.05)
        try:
            yield Live(f"http://127.0.0.1:{port}", settings, alice, bob, admin)
        finally:
            server.should_exit = True
            thread.join(timeout=timing.seconds(30))
            listener.close()
