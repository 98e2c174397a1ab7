"""leaderboard: one counter of committed board changes, for per-process board snapshots

A leaderboard page is served from a snapshot of its board held by each API process
(``models.boards.snapshots``); ``board_versions`` holds the one counter (row id 1) that tells a
process its snapshot is stale. Session events increment it in every transaction that changes
what a board shows (``models.db.board_version``).

Revision ID: 0013
Revises: 0012
Created: 2026-11-28 01:30:00
"""

import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    table = op.create_table(
        "board_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    # a random epoch: a database rebuilt under the same URL never repeats a cached version
    op.bulk_insert(table, [{"id": 1, "epoch": secrets.randbits(62), "version": 0}])


def downgrade() -> None:
    op.drop_table("board_versions")
