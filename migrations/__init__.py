"""Alembic migrations of the certbench database, runnable from an installed wheel.

``certbench serve`` and the tests call ``upgrade(settings)``; developers can also run
``uv run alembic upgrade head`` with the repository's ``alembic.ini``. Tables are never made with
``create_all``: the migrations are the schema.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from models.core.settings import Settings

SCRIPT_LOCATION = Path(__file__).resolve().parent


def alembic_config(settings: Settings) -> Config:
    """An Alembic config pointing at this package and ``settings.database_url``."""
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    config.set_main_option("path_separator", "os")
    config.attributes["database_url"] = settings.database_url
    return config


def upgrade(settings: Settings, revision: str = "head") -> None:
    """Bring the database to ``revision`` (default: the newest)."""
    command.upgrade(alembic_config(settings), revision)


def downgrade(settings: Settings, revision: str = "base") -> None:
    """Take the database back to ``revision`` (default: empty)."""
    command.downgrade(alembic_config(settings), revision)
