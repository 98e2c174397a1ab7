"""Engines and sessions for SQLite (embedded default) and PostgreSQL (production).

One engine per database URL per process, created lazily (no side effects at import). SQLite gets
WAL, a busy timeout and foreign keys so the API and an embedded worker process can share the file.
PostgreSQL connections get bounds on every network wait (``NetworkTimeouts``) and a ping before
each use: across hosts the database can restart or its link go silent.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


@dataclass(frozen=True)
class NetworkTimeouts:
    """Bounds on a PostgreSQL connection's network waits (``Settings.database_*``), so a silent
    link (a partition between hosts) fails a call in seconds rather than after the kernel's TCP
    retries. ``statement`` 0: no server-side statement limit (migrations)."""

    connect: int = 5
    tcp: int = 10
    statement: int = 0

    @classmethod
    def of(cls, settings: Settings) -> NetworkTimeouts:
        return cls(
            connect=settings.database_connect_timeout_seconds,
            tcp=settings.database_tcp_timeout_seconds,
            statement=settings.database_statement_timeout_seconds,
        )

    def connect_args(self) -> dict[str, Any]:
        """libpq connection parameters (psycopg passes them through).

        Both ends of the connection get the bounds. This side's (``tcp_user_timeout``, TCP
        keepalives) fail a call on a silent link. The server's (the same settings sent as
        session parameters in ``options``) end a session whose client went silent: a worker
        partitioned between two statements of a transaction would otherwise keep its row locks
        until the partition heals (the server's own keepalives start after two hours), and
        every other worker touching those rows waits behind it.
        """
        idle = max(1, self.tcp // 2)
        interval = max(1, (self.tcp - idle) // 3)
        args: dict[str, Any] = {
            "connect_timeout": self.connect,
            "tcp_user_timeout": self.tcp * 1000,
            "keepalives": 1,
            "keepalives_idle": idle,
            "keepalives_interval": interval,
            "keepalives_count": 3,
        }
        server = {
            "tcp_user_timeout": self.tcp * 1000,
            "tcp_keepalives_idle": idle,
            "tcp_keepalives_interval": interval,
            "tcp_keepalives_count": 3,
        }
        if self.statement:
            server["statement_timeout"] = self.statement * 1000
        args["options"] = " ".join(f"-c {name}={value}" for name, value in server.items())
        return args


def create_db_engine(
    database_url: str, *, pooled: bool = True, timeouts: NetworkTimeouts | None = None
) -> Engine:
    """A new engine for ``database_url`` (creates the SQLite file's parent folder).

    ``pooled=False`` gives a NullPool engine for one-off jobs (migrations) that must not leave
    connections open behind them. PostgreSQL connections get ``timeouts`` (default: connect and
    TCP bounds, no statement limit); pooled ones are pinged before use (``pool_pre_ping``), so a
    connection the server closed (a restart) is replaced instead of failing the request.
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
    connect_args = (timeouts or NetworkTimeouts()).connect_args()
    return create_engine(url, connect_args=connect_args, **pool_args)


def get_engine(settings: Settings) -> Engine:
    """The process-wide engine for ``settings.database_url``."""
    engine = _ENGINES.get(settings.database_url)
    if engine is None:
        engine = _ENGINES[settings.database_url] = create_db_engine(
            settings.database_url, timeouts=NetworkTimeouts.of(settings)
        )
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
