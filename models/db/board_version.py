"""One counter that moves whenever anything a leaderboard shows changes, in the same transaction.

Leaderboard reads keep per-process snapshots of a board (``models.boards.snapshots``) and memoised
fits (effective robustness); each is valid for one value of ``board_versions.version``. Reading
the counter is one primary-key lookup, so every request can afford to check it.

The counter is kept by session events, not by each writer remembering to call something:
``before_flush`` marks a session whose flush adds, deletes or changes a row a board shows (a
submission's board columns, an entry, its figures, an owner's name, a benchmark), and
``do_orm_execute`` marks one that runs a Core INSERT/UPDATE/DELETE on those tables (an UPDATE of
submissions only when it sets a board column: the progress and lease updates of running shards do
not move it). ``before_commit`` flushes, and a marked session increments the counter just before
its COMMIT, so the row lock is held for the commit only and the counter's order is the commits'
order: a reader that sees version ``v`` sees every change committed before it.

Every write of these tables goes through a session (there is no raw connection use in models/,
api/ or workers/); migrations run before the service starts, and a process restart drops every
snapshot anyway.
"""

from __future__ import annotations

import secrets
from typing import Any, cast

from sqlalchemy import BigInteger, Integer, event, inspect, select, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.orm import Mapped, ORMExecuteState, Session, mapped_column

from models.db.base import Base
from models.db.entities import (
    Benchmark,
    LeaderboardEntry,
    LeaderboardFigures,
    MetricValue,
    Submission,
    User,
)
from models.db.states import SubmissionState

__all__ = ["BoardVersion", "current", "mark_changed"]

ROW_ID = 1


class BoardVersion(Base):
    """The single row (id 1) whose ``version`` counts committed board changes.

    ``epoch`` is drawn at random when the row is created, so a database emptied and refilled under
    the same URL (its row deleted with the rest) never repeats a (epoch, version) that a process
    has cached.
    """

    __tablename__ = "board_versions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    epoch: Mapped[int] = mapped_column(BigInteger)
    version: Mapped[int] = mapped_column(BigInteger, default=0)


def new_epoch() -> int:
    """A random epoch for a new counter row (62 bits: a signed BIGINT everywhere)."""
    return secrets.randbits(62)


#: Submission columns that change while a run is in flight and that no board shows; a change of
#: any other column (state, flags, visibility, name, ...) moves the counter.
RUNNING_COLUMNS = frozenset(
    {
        "message",
        "reason",
        "attempt",
        "recoveries",
        "shards_total",
        "shards_done",
        "progress",
        "estimated_forward_passes",
        "worker",
        "updated_at",
        "started_at",
        "heartbeat_at",
        "lease_expires_at",
    }
)
#: Columns of users a board shows (the owner's name); role changes act per request.
USER_COLUMNS = frozenset({"name"})
#: Tables whose every change moves the counter. Stage results are not among them: a unit's
#: results are merged while its run is in flight (192 times per run on CIFAR-10-F), before the
#: entry reaches a board, and a finished entry's results change only with a re-run, which
#: removes its leaderboard entry.
BOARD_TABLES = frozenset(
    t.__tablename__ for t in (Benchmark, LeaderboardEntry, LeaderboardFigures, MetricValue)
)

_FLAG = "certbench.board_changed"


def mark_changed(session: Session) -> None:
    """Have the session's commit move the counter (for a writer the events cannot see)."""
    session.info[_FLAG] = True


def current(session: Session) -> tuple[int | None, int]:
    """The committed (epoch, version) as this session's transaction sees it; (None, 0) while the
    row is missing (a database whose tables were emptied: the next change recreates it)."""
    found = session.execute(
        select(BoardVersion.epoch, BoardVersion.version).where(BoardVersion.id == ROW_ID)
    ).first()
    return (None, 0) if found is None else (found[0], found[1])


def _changed_columns(instance: Any) -> set[str]:
    state = inspect(instance)
    return {attr.key for attr in state.attrs if attr.history.has_changes()}


def _shows(instance: Any, columns: set[str] | None) -> bool:
    """Whether adding, deleting (``columns`` None) or changing ``columns`` of ``instance``
    changes what a board shows (a new submission is on no board until it finishes)."""
    if isinstance(instance, Submission):
        if columns is None:
            return inspect(instance).persistent or instance.state == SubmissionState.FINISHED
        return bool(columns - RUNNING_COLUMNS)
    if isinstance(instance, User):
        return columns is None or bool(columns & USER_COLUMNS)
    return getattr(instance, "__tablename__", None) in BOARD_TABLES


def _before_flush(session: Session, _context: Any, _instances: Any) -> None:
    if session.info.get(_FLAG):
        return
    if any(_shows(obj, None) for obj in (*session.new, *session.deleted)) or any(
        _shows(obj, _changed_columns(obj)) for obj in session.dirty
    ):
        mark_changed(session)


def _dml_columns(statement: Any) -> set[str] | None:
    """The columns an UPDATE sets (None when they cannot be told: count it as a change)."""
    values = getattr(statement, "_values", None)
    if not values:
        return None
    return {getattr(column, "key", str(column)) for column in values}


def _do_orm_execute(state: ORMExecuteState) -> None:
    if state.session.info.get(_FLAG) or not (state.is_insert or state.is_update or state.is_delete):
        return
    table = getattr(state.statement, "table", None)
    name = getattr(table, "name", None)
    if name == BoardVersion.__tablename__:
        return
    columns = _dml_columns(state.statement) if state.is_update else None
    if name == Submission.__tablename__:
        changed = columns is None or bool(columns - RUNNING_COLUMNS)
    elif name == User.__tablename__:
        changed = columns is None or bool(columns & USER_COLUMNS)
    else:
        changed = name in BOARD_TABLES
    if changed:
        mark_changed(state.session)


_HAS_TABLE: set[str] = set()
"""Database URLs known to hold ``board_versions`` (a database at a revision before 0013, as in
the migration tests, has no counter to move)."""


def _has_counter(session: Session) -> bool:
    bind = session.get_bind()
    url = str(bind.engine.url)
    if url not in _HAS_TABLE and inspect(session.connection()).has_table(
        BoardVersion.__tablename__
    ):
        _HAS_TABLE.add(url)
    return url in _HAS_TABLE


def _before_commit(session: Session) -> None:
    session.flush()
    if not session.info.pop(_FLAG, False) or not _has_counter(session):
        return
    bumped = cast(
        "CursorResult[Any]",
        session.execute(
            update(BoardVersion)
            .where(BoardVersion.id == ROW_ID)
            .values(version=BoardVersion.version + 1)
            .execution_options(synchronize_session=False)
        ),
    )
    if bumped.rowcount == 0:  # the row was deleted with the rest of the data
        session.add(BoardVersion(id=ROW_ID, epoch=new_epoch(), version=1))
        session.flush()


def _forget(session: Session, *_args: Any) -> None:
    session.info.pop(_FLAG, None)


event.listen(Session, "before_flush", _before_flush)
event.listen(Session, "do_orm_execute", _do_orm_execute)
event.listen(Session, "before_commit", _before_commit)
event.listen(Session, "after_rollback", _forget)
