"""Fixtures for the client tests: the real app served by uvicorn on a free local port (a thread
of the test process; SQLite and the embedded broker), users with real tokens, the tiny benchmark,
and a helper that finishes a submission through the real pipeline functions (as a worker would,
with deterministic records) so results and leaderboard rows exist.

The client talks to the server over real TCP, exactly as it would to a deployment. The config
file and cache of the client live under the test's temporary folder, never the user's.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn
from sqlalchemy import select

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from service_db import MigratedTemplates, service_settings, templates
from service_factories import load_tiny, make_user, manifest, run_pipeline, weights_bytes

from api.main import create_app
from models.core.settings import Settings
from models.db.engine import session_scope
from models.db.entities import Role, Submission
from models.db.states import SubmissionState
from models.submissions import lifecycle as pipeline


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


@dataclass
class Live:
    """A running server: its URL, settings (database, artifacts) and three users' tokens."""

    url: str
    settings: Settings
    alice: str
    bob: str
    admin: str

    def finish(self, submission_id: int, *, quality: float = 0.5) -> None:
        """Validate, run and aggregate a submission as a worker does (deterministic records)."""
        with session_scope(self.settings) as session:
            run_pipeline(session, submission_id, settings=self.settings, quality=quality)

    def reject(self, submission_id: int) -> None:
        """Reject a submission at validation, as a worker does for weights that do not fit."""
        with session_scope(self.settings) as session:
            pipeline.reject(
                session,
                submission_id,
                reason="state_dict_mismatch",
                message="weights do not fit architecture 'cifar_resnet20'",
                settings=self.settings,
            )

    @contextmanager
    def worker(self, handle: Callable[[int], None]) -> Iterator[None]:
        """A background thread that passes every newly submitted submission to ``handle``
        (``finish`` or ``reject``) while the block runs, as a worker would pick it up."""
        stop = threading.Event()
        failures: list[BaseException] = []

        def loop() -> None:
            try:
                while not stop.wait(0.05):
                    with session_scope(self.settings) as session:
                        waiting = session.scalars(
                            select(Submission.id).where(
                                Submission.state == SubmissionState.SUBMITTED
                            )
                        ).all()
                    for submission_id in waiting:
                        handle(submission_id)
            except BaseException as err:  # reported by the test, never lost
                failures.append(err)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=30)
        if failures:
            raise failures[0]


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
        deadline = time.monotonic() + 60
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise AssertionError("the uvicorn server did not start")
            time.sleep(0.05)
        try:
            yield Live(f"http://127.0.0.1:{port}", settings, alice, bob, admin)
        finally:
            server.should_exit = True
            thread.join(timeout=30)
            listener.close()


def model_files(folder: Path, *, seed: int = 0, **manifest_changes: object) -> tuple[Path, Path]:
    """A real cifar_resnet20 safetensors file and its manifest for the tiny benchmark."""
    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / f"model-{seed}.safetensors"
    weights.write_bytes(weights_bytes(seed))
    document = manifest(name=f"resnet20 seed {seed}") | manifest_changes
    path = folder / f"manifest-{seed}.json"
    path.write_text(json.dumps(document))
    return weights, path
