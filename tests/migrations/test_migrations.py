"""Migrations: upgrade/downgrade on SQLite and the real PostgreSQL, and no drift between the ORM
and the migrations (what ``alembic check`` does, run against both databases)."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

import migrations
from models.core.settings import Settings
from models.db.engine import create_db_engine
from models.db.entities import Base
from tests.support.service_db import BACKENDS, service_settings

APP_TABLES = {t.name for t in Base.metadata.sorted_tables}


def table_names(url: str) -> set[str]:
    engine = create_db_engine(url, pooled=False)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
def test_upgrade_downgrade_roundtrip(backend: str, tmp_path: Path):
    with service_settings(backend, tmp_path, migrate=False) as settings:
        assert table_names(settings.database_url) == set()
        migrations.upgrade(settings)
        assert table_names(settings.database_url) == APP_TABLES
        migrations.downgrade(settings)
        assert table_names(settings.database_url) == set()
        migrations.upgrade(settings)
        assert table_names(settings.database_url) == APP_TABLES


@pytest.mark.parametrize("backend", BACKENDS)
def test_models_and_migrations_do_not_drift(backend: str, tmp_path: Path):
    with service_settings(backend, tmp_path, migrate=False) as settings:
        migrations.upgrade(settings)
        engine = create_db_engine(settings.database_url, pooled=False)
        try:
            with engine.connect() as connection:
                context = MigrationContext.configure(
                    connection, opts={"compare_type": True, "render_as_batch": True}
                )
                diff = compare_metadata(context, Base.metadata)
                heads = set(context.get_current_heads())
        finally:
            engine.dispose()
        assert diff == [], f"models/ and migrations/ differ; add a migration: {diff}"
        script = ScriptDirectory.from_config(migrations.alembic_config(settings))
        assert heads == set(script.get_heads())


def test_single_linear_history():
    script = ScriptDirectory.from_config(migrations.alembic_config(Settings()))
    assert len(script.get_heads()) == 1, "two migration heads: merge them"
    revisions = list(script.walk_revisions())
    assert revisions[-1].down_revision is None
