"""Alembic environment: the database URL comes from ``models.core.settings.Settings`` (or from the
caller via ``config.attributes['database_url']``), never from alembic.ini."""

from __future__ import annotations

from alembic import context

from models.core.settings import Settings
from models.db.engine import create_db_engine
from models.db.entities import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    return config.attributes.get("database_url") or Settings().database_url


def run_migrations_offline() -> None:
    """Emit SQL without a connection (``alembic upgrade head --sql``)."""
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate through a live connection; batch mode so ALTERs also work on SQLite."""
    engine = create_db_engine(_url(), pooled=False)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=True,
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
