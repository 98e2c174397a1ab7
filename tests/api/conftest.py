"""Fixtures for the REST API tests: the real app (``create_app``) behind httpx's TestClient, a
migrated database per test (SQLite; PostgreSQL with a real Redis broker under ``integration``),
users with real tokens, and a consumer that reads what the API queued for the workers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from api.main import create_app
from models.core.settings import Settings
from models.db.engine import session_scope
from models.db.entities import Role
from tests.support.analysis_factories import SavedFamilies
from tests.support.api import Actors, fresh_redis, redis_database
from tests.support.service_db import BACKENDS, MigratedTemplates, service_settings, templates
from tests.support.service_factories import load_tiny, make_user


@pytest.fixture(scope="session")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MigratedTemplates]:
    with templates(tmp_path_factory.mktemp("templates")) as cache:
        yield cache


@pytest.fixture(scope="module")
def api_redis_url() -> Iterator[str]:
    """A Redis database claimed for the PostgreSQL tests of one module (``redis_database``)."""
    with redis_database() as url:
        yield url


@pytest.fixture(params=BACKENDS)
def settings(
    request: pytest.FixtureRequest, tmp_path: Path, migrated: MigratedTemplates
) -> Iterator[Settings]:
    """SQLite + embedded broker, or PostgreSQL + Redis (a claimed database, flushed per test)."""
    extra = {}
    if request.param == "postgresql":
        extra["broker_url"] = request.getfixturevalue("api_redis_url")
        fresh_redis(extra["broker_url"])
    with service_settings(request.param, tmp_path / "data", template=migrated, **extra) as value:
        yield value
    if request.param == "postgresql":
        fresh_redis(extra["broker_url"])


@pytest.fixture
def session(settings: Settings) -> Iterator[Session]:
    with session_scope(settings) as value:
        yield value


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as value:
        yield value


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


@pytest.fixture(scope="module")
def saved_families(tmp_path_factory: pytest.TempPathFactory) -> SavedFamilies:
    """The module's effective-robustness families, one per backend (``Family.built_once``)."""
    return SavedFamilies(tmp_path_factory.mktemp("families"))
