"""Database fixtures shared by the tests of models/, api/ and migrations/.

SQLite runs in a temporary folder. PostgreSQL is the real local server (127.0.0.1:5432, database
``test`` for the admin connection, override with CERTBENCH_TEST_POSTGRES_URL): every use gets its
own freshly created database, dropped afterwards. If the server is not running the tests FAIL
with instructions, they are never skipped.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import Connection, text, update

import migrations
from models.boards import snapshots as board_snapshots
from models.core.settings import Settings
from models.db.board_version import BoardVersion, new_epoch
from models.db.engine import dispose_engines, get_engine
from models.db.entities import Base

POSTGRES_ADMIN_URL = os.environ.get(
    "CERTBENCH_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
HOW_TO_START = (
    "PostgreSQL is required for the integration tests and is not reachable at {url} ({err}). "
    "Start it (e.g. `pg_ctlcluster 15 main start` or `service postgresql start`; trust auth, a "
    "database named `test`), or point CERTBENCH_TEST_POSTGRES_URL at a server where this user "
    "may CREATE DATABASE."
)
BACKENDS = ("sqlite", pytest.param("postgresql", marks=pytest.mark.integration))


def _admin_connection() -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as err:
        pytest.fail(HOW_TO_START.format(url=POSTGRES_ADMIN_URL, err=err), pytrace=False)


@contextmanager
def postgres_database() -> Iterator[str]:
    """A new, empty PostgreSQL database; yields its URL and drops it afterwards."""
    name = f"certbench_test_{uuid.uuid4().hex[:12]}"
    with _admin_connection() as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        dispose_engines()
        with _admin_connection() as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


class MigratedTemplates:
    """Migrate once per test session: SQLite tests get a copy of the migrated file, PostgreSQL
    tests share one migrated database per session and truncate every table before use (creating
    a database per test costs about a second on this machine)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._sqlite: Path | None = None
        self._postgres: str | None = None

    def sqlite_file(self) -> Path:
        if self._sqlite is None:
            settings = Settings(data_dir=self.folder / "sqlite-template", environment="test")
            migrations.upgrade(settings)
            dispose_engines()
            self._sqlite = settings.data_dir / "certbench.db"
        return self._sqlite

    def postgres_url(self) -> str:
        """URL of this session's migrated database (tests truncate it before use)."""
        if self._postgres is None:
            name = f"certbench_tmpl_{uuid.uuid4().hex[:12]}"
            with _admin_connection() as admin:
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            url = f"{POSTGRES_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
            migrations.upgrade(Settings(data_dir=self.folder, database_url=url))
            dispose_engines()
            self._postgres = name
        return f"{POSTGRES_ADMIN_URL.rsplit('/', 1)[0]}/{self._postgres}"

    def close(self) -> None:
        if self._postgres is not None:
            with _admin_connection() as admin:
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(self._postgres)
                    )
                )
            self._postgres = None


@contextmanager
def templates(folder: Path) -> Iterator[MigratedTemplates]:
    cache = MigratedTemplates(folder)
    try:
        yield cache
    finally:
        cache.close()


@contextmanager
def service_settings(
    backend: str,
    data_dir: Path,
    *,
    migrate: bool = True,
    template: MigratedTemplates | None = None,
    **overrides: Any,
) -> Iterator[Settings]:
    """Settings for a fresh database of ``backend`` with data under ``data_dir``; migrated to head
    (copied from ``template`` when given) unless ``migrate`` is False."""
    overrides.setdefault("environment", "test")
    # The factories' benchmarks name Hub repos that exist nowhere (``certbench/tiny``); tests of
    # the local-data check (tests/api/test_api_demo.py) turn it on where they need it.
    overrides.setdefault("require_local_data", False)
    if backend == "sqlite":
        settings = Settings(data_dir=data_dir, **overrides)
        if migrate and template is not None:
            data_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(template.sqlite_file(), data_dir / "certbench.db")
        elif migrate:
            migrations.upgrade(settings)
        try:
            yield settings
        finally:
            dispose_engines()
        return
    if migrate and template is not None:
        settings = Settings(data_dir=data_dir, database_url=template.postgres_url(), **overrides)
        _truncate_all(settings)
        try:
            yield settings
        finally:
            dispose_engines()
        return
    with postgres_database() as url:
        settings = Settings(data_dir=data_dir, database_url=url, **overrides)
        if migrate:
            migrations.upgrade(settings)
        yield settings


#: The sequences owned by the application tables, per database URL (looked up once per session).
_OWNED_SEQUENCES: dict[str, list[str]] = {}

_OWNED_SEQUENCES_QUERY = """
    SELECT seq.relname FROM pg_class seq
    JOIN pg_depend dep ON dep.objid = seq.oid AND dep.deptype IN ('a', 'i')
    JOIN pg_class tab ON tab.oid = dep.refobjid
    WHERE seq.relkind = 'S' AND tab.relname = ANY(:tables)
"""


def _truncate_all(settings: Settings) -> None:
    """Empty every application table (and reset ids) of the shared per-session database.

    ``DELETE`` child tables first, then restart the sequences the tables own: what ``TRUNCATE
    ... RESTART IDENTITY CASCADE`` does, but a TRUNCATE of the 16 tables cost 0.36 s per test here
    (it replaces every table's files) and these DELETEs of a test's few rows 0.02 s.
    """
    with get_engine(settings).begin() as connection:
        for table in reversed(Base.metadata.sorted_tables):
            connection.execute(table.delete())
        for sequence in _owned_sequences(connection, settings):
            connection.execute(text(f'ALTER SEQUENCE "{sequence}" RESTART'))


@dataclass(frozen=True)
class DatabaseSnapshot:
    """Every application row of a service database, its sequences' positions and a copy of its
    artifacts folder: what a fixture built once through the real pipeline, restored for each
    test that starts from it (``restore``) instead of being built again."""

    rows: dict[str, list[dict[str, Any]]]
    sequences: dict[str, tuple[int, bool]]
    artifacts: Path


def _owned_sequences(connection: Connection, settings: Settings) -> list[str]:
    url = str(settings.database_url)
    if url not in _OWNED_SEQUENCES:
        tables = [table.name for table in Base.metadata.sorted_tables]
        rows = connection.execute(text(_OWNED_SEQUENCES_QUERY), {"tables": tables})
        _OWNED_SEQUENCES[url] = sorted(row[0] for row in rows)
    return _OWNED_SEQUENCES[url]


def snapshot(settings: Settings, folder: Path) -> DatabaseSnapshot:
    """The committed state of ``settings``' database and artifacts (copied under ``folder``)."""
    engine = get_engine(settings)
    with engine.connect() as connection:
        rows = {
            table.name: [dict(row._mapping) for row in connection.execute(table.select())]
            for table in Base.metadata.sorted_tables
        }
        sequences = {}
        if engine.dialect.name == "postgresql":
            for name in _owned_sequences(connection, settings):
                found = connection.execute(text(f'SELECT last_value, is_called FROM "{name}"'))
                sequences[name] = tuple(found.one())
    artifacts = folder / "artifacts"
    if settings.artifacts_dir.exists():
        shutil.copytree(settings.artifacts_dir, artifacts)
    return DatabaseSnapshot(rows=rows, sequences=sequences, artifacts=artifacts)


def restore(settings: Settings, saved: DatabaseSnapshot) -> None:
    """Make ``settings``' database and artifacts what ``saved`` holds: every table emptied and
    refilled with the saved rows, ids continuing where they did, the board counter under a new
    epoch (as a database refilled under the same URL gets: no process serves a board it cached
    for another test's rows) and the artifacts copied back."""
    engine = get_engine(settings)
    tables = Base.metadata.sorted_tables
    with engine.begin() as connection:
        for table in reversed(tables):
            connection.execute(table.delete())
        for table in tables:
            if saved.rows[table.name]:
                connection.execute(table.insert(), saved.rows[table.name])
        for name, (value, called) in saved.sequences.items():
            connection.execute(
                text("SELECT setval(:name, :value, :called)"),
                {"name": f'"{name}"', "value": value, "called": called},
            )
        connection.execute(update(BoardVersion).values(epoch=new_epoch()))
    board_snapshots.forget()
    if saved.artifacts.exists():
        shutil.copytree(saved.artifacts, settings.artifacts_dir, dirs_exist_ok=True)
