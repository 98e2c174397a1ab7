"""Fixtures for the REST API tests: the real app (``create_app``) behind httpx's TestClient, a
migrated database per test (SQLite; PostgreSQL with a real Redis broker under ``integration``),
users with real tokens, and a consumer that reads what the API queued for the workers."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from kombu import Connection
from sqlalchemy.orm import Session

from api.main import create_app
from models.core.queue import CONTROL_QUEUE, TASK_VALIDATE, celery_config
from models.core.settings import Settings
from models.db.engine import session_scope
from models.db.entities import Role

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from service_db import BACKENDS, MigratedTemplates, service_settings, templates
from service_factories import load_tiny, make_user

#: The API tests' Redis database: 13, minus the pytest-xdist worker's number (gw1 → 12), so that
#: parallel workers never flush each other's queues; CERTBENCH_TEST_REDIS_DB overrides it (two
#: checkouts side by side). The e2e tests claim databases below API_REDIS_DATABASES only.
API_REDIS_DATABASES = range(10, 14)


def _redis_db() -> str:
    explicit = os.environ.get("CERTBENCH_TEST_REDIS_DB")
    if explicit:
        return explicit
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    return str(API_REDIS_DATABASES[-1] - worker)


REDIS_URL = f"redis://127.0.0.1:6379/{_redis_db()}"
HOW_TO_START_REDIS = (
    "Redis is required for the integration tests and is not reachable at {url} ({err}). Start it "
    "(e.g. `redis-server --daemonize yes` or `service redis-server start`)."
)


@pytest.fixture(scope="session")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MigratedTemplates]:
    with templates(tmp_path_factory.mktemp("templates")) as cache:
        yield cache


def _fresh_redis() -> None:
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).flushdb()
    except redis.exceptions.ConnectionError as err:
        pytest.fail(HOW_TO_START_REDIS.format(url=REDIS_URL, err=err), pytrace=False)


@pytest.fixture(params=BACKENDS)
def settings(
    request: pytest.FixtureRequest, tmp_path: Path, migrated: MigratedTemplates
) -> Iterator[Settings]:
    """SQLite + embedded broker, or PostgreSQL + Redis (database 13, flushed per test)."""
    extra = {}
    if request.param == "postgresql":
        _fresh_redis()
        extra["broker_url"] = REDIS_URL
    with service_settings(request.param, tmp_path / "data", template=migrated, **extra) as value:
        yield value
    if request.param == "postgresql":
        _fresh_redis()


@pytest.fixture
def session(settings: Settings) -> Iterator[Session]:
    with session_scope(settings) as value:
        yield value


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as value:
        yield value


@dataclass
class Actors:
    """Bearer headers of a submitter (alice), another submitter (bob) and an admin (root)."""

    alice: dict[str, str]
    bob: dict[str, str]
    admin: dict[str, str]
    alice_id: int
    bob_id: int


@pytest.fixture
def actors(session: Session) -> Actors:
    load_tiny(session)
    alice, alice_token = make_user(session, "alice")
    bob, bob_token = make_user(session, "bob")
    _, admin_token = make_user(session, "root", Role.ADMIN)
    return Actors(
        alice={"Authorization": f"Bearer {alice_token}"},
        bob={"Authorization": f"Bearer {bob_token}"},
        admin={"Authorization": f"Bearer {admin_token}"},
        alice_id=alice.id,
        bob_id=bob.id,
    )


def drain_validations(settings: Settings) -> list[int]:
    """Consume every message the API queued (as a worker would) and return the submission ids
    of the ``certbench.validate`` tasks, in order."""
    config = celery_config(settings)
    ids = []
    with Connection(
        config["broker_url"], transport_options=config["broker_transport_options"]
    ) as connection:
        queue = connection.SimpleQueue(CONTROL_QUEUE)
        try:
            while True:
                try:
                    message = queue.get(block=False)
                except queue.Empty:
                    break
                message.ack()
                assert message.headers["task"] == TASK_VALIDATE
                args, _kwargs, _embed = message.payload
                ids.append(args[0])
        finally:
            queue.close()
    return ids
