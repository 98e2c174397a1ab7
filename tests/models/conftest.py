"""Fixtures for the models tests: a migrated database per test on SQLite, and (marked
``integration``) the same tests on the real local PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from models.core.settings import Settings
from models.db.engine import session_scope
from tests.support.service_db import BACKENDS, MigratedTemplates, service_settings, templates


@pytest.fixture(scope="session")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MigratedTemplates]:
    with templates(tmp_path_factory.mktemp("templates")) as cache:
        yield cache


@pytest.fixture(params=BACKENDS)
def settings(
    request: pytest.FixtureRequest, tmp_path: Path, migrated: MigratedTemplates
) -> Iterator[Settings]:
    with service_settings(request.param, tmp_path / "data", template=migrated) as value:
        yield value


@pytest.fixture
def session(settings: Settings) -> Iterator[Session]:
    with session_scope(settings) as value:
        yield value
