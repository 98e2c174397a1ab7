"""progress of running shards and the estimated work of submissions

Adds ``shard_dispatches.images_done``, ``samples_done``, ``started_at`` and ``updated_at`` (the
running attempt's partial counts, written by the worker's lease; final counts once recorded) and
``submissions.estimated_forward_passes`` (the work estimated at intake, counted by the daily
compute quota; NULL for submissions made before this migration, which count as no work).

Revision ID: 0009
Revises: 0008
Created: 2026-11-25 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import models.db.base

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DISPATCH_COLUMNS = ("updated_at", "started_at", "samples_done", "images_done")


def upgrade() -> None:
    # In place (not a batch copy): plain column additions work on SQLite and PostgreSQL alike.
    op.add_column(
        "shard_dispatches",
        sa.Column("images_done", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )
    op.add_column(
        "shard_dispatches",
        sa.Column("samples_done", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
    )
    op.add_column(
        "shard_dispatches",
        sa.Column("started_at", models.db.base.UTCDateTime(timezone=True), nullable=True),
    )
    op.add_column(
        "shard_dispatches",
        sa.Column("updated_at", models.db.base.UTCDateTime(timezone=True), nullable=True),
    )
    op.add_column(
        "submissions", sa.Column("estimated_forward_passes", sa.BigInteger(), nullable=True)
    )


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    columns = [("submissions", "estimated_forward_passes")]
    columns += [("shard_dispatches", name) for name in DISPATCH_COLUMNS]
    for table, column in columns:
        if sqlite:  # SQLite ≥ 3.35 drops a plain column in place
            op.execute(sa.text(f'ALTER TABLE "{table}" DROP COLUMN "{column}"'))
        else:
            op.drop_column(table, column)
