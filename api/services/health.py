"""Readiness checks: is the database reachable and migrated, is the broker reachable."""

from __future__ import annotations

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from api.queue import JobQueue
from api.schemas.health import Readiness
from models.core.errors import ServiceUnavailableError
from models.core.settings import Settings


def readiness(session: Session, queue: JobQueue, *, settings: Settings) -> Readiness:
    """Each dependency's state in words; ``status`` is ready only if all are."""
    # alembic (with mako and pygments) on first use: 0.6 s of every API process's start
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    from migrations import alembic_config

    database, migrations = "ok", "ok"
    try:
        connection = session.connection()
        current = set(MigrationContext.configure(connection).get_current_heads())
        head = set(ScriptDirectory.from_config(alembic_config(settings)).get_heads())
        if current != head:
            migrations = f"at {sorted(current) or 'empty'}, head is {sorted(head)}: run migrations"
    except SQLAlchemyError as err:
        database = f"unreachable: {type(err).__name__}"
        migrations = "unknown"
    try:
        queue.ping()
        queue_state = "ok"
    except ServiceUnavailableError as err:
        queue_state = str(err)
    ok = database == "ok" and migrations == "ok" and queue_state == "ok"
    return Readiness(
        status="ready" if ok else "unavailable",
        database=database,
        migrations=migrations,
        queue=queue_state,
        embedded_broker=settings.embedded_broker,
    )
