"""Engines and sessions for SQLite (embedded default) and PostgreSQL (production).

One engine per database URL per process, created lazily (no side effects at import). SQLite gets
WAL, a busy timeout and foreign keys so the API and an embedded worker process can share the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from sqlalchemy import CursorResult, Delete, Engine, Update, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from models.core.settings import Settings
from models.db import board_version as _board_version  # noqa: F401  (its session events)

_ENGINES: dict[str, Engine] = {}
_SESSIONMAKERS: dict[str, sessionmaker[Session]] = {}

SQLITE_BUSY_TIMEOUT_MS = 30_000


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def create_db_engine(database_url: str, *, pooled: bool = True) -> Engine:
    """A new engine for ``database_url`` (creates the SQLite file's parent folder).

    ``pooled=False`` gives a NullPool engine for one-off jobs (migrations) that must not leave
    connections open behind them.
    """
    url = make_url(database_url)
    pool_args: dict[str, Any] = {} if pooled else {"poolclass": NullPool}
    if url.get_backend_name() == "sqlite":
        if url.database and url.database != ":memory:":
            Path(url.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
            **pool_args,
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if pooled:
        pool_args = {"pool_pre_ping": True, "pool_size": 10, "max_overflow": 20}
    return create_engine(url, **pool_args)


def get_engine(settings: Settings) -> Engine:
    """The process-wide engine for ``settings.database_url``."""
    engine = _ENGINES.get(settings.database_url)
    if engine is None:
        engine = _ENGINES[settings.database_url] = create_db_engine(settings.database_url)
    return engine


def get_sessionmaker(settings: Settings) -> sessionmaker[Session]:
    """Session factory bound to the process-wide engine; objects stay usable after commit."""
    factory = _SESSIONMAKERS.get(settings.database_url)
    if factory is None:
        factory = sessionmaker(bind=get_engine(settings), expire_on_commit=False)
        _SESSIONMAKERS[settings.database_url] = factory
    return factory


@contextmanager
def session_scope(settings: Settings) -> Iterator[Session]:
    """A session that is rolled back on error and always closed.

    Data functions in ``models`` commit their own unit of work; this scope only guarantees that a
    failure leaves no half-finished transaction open.
    """
    session = get_sessionmaker(settings)()
    try:
        yield session
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def dispose_engines() -> None:
    """Close every pooled connection (tests dropping their database; forked workers)."""
    for engine in _ENGINES.values():
        engine.dispose()
    _ENGINES.clear()
    _SESSIONMAKERS.clear()


def rows_matched(session: Session, statement: Update | Delete) -> int:
    """Execute an UPDATE or DELETE in ``session``; the number of rows it matched.

    ``Session.execute`` is typed as returning a plain ``Result``; for these statements it is a
    ``CursorResult``, the result that carries ``rowcount``."""
    return cast("CursorResult[Any]", session.execute(statement)).rowcount
