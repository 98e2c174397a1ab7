"""shard dispatches: the database's record of work sent to the broker and of who runs it

Revision ID: 0006
Revises: 0005
Created: 2026-11-23 03:50:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import models.db.base

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "shard_dispatches",
        sa.Column("submission_id", sa.Integer(), nullable=False),
        sa.Column("stage", sa.String(length=32), nullable=False),
        sa.Column("unit", sa.String(length=64), nullable=False),
        sa.Column("shard_index", sa.Integer(), nullable=False),
        sa.Column("dispatched_at", models.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("dispatches", sa.Integer(), nullable=False),
        sa.Column("claimed_by", sa.String(length=128), nullable=True),
        sa.Column("claimed_until", models.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("expired_claims", sa.Integer(), nullable=False),
        sa.Column("history", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["submission_id"], ["submissions.id"],
                                name=op.f("fk_shard_dispatches_submission_id_submissions"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("submission_id", "stage", "unit", "shard_index",
                                name=op.f("pk_shard_dispatches")),
    )  # fmt: skip
    with op.batch_alter_table("shard_dispatches", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_shard_dispatches_claimed_until"), ["claimed_until"], unique=False
        )
    # In place (not a batch copy): ``submissions`` is referenced by other tables' rows.
    op.add_column(
        "submissions",
        sa.Column("recoveries", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute(sa.text('ALTER TABLE "submissions" DROP COLUMN "recoveries"'))
    else:
        op.drop_column("submissions", "recoveries")
    with op.batch_alter_table("shard_dispatches", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_shard_dispatches_claimed_until"))
    op.drop_table("shard_dispatches")
