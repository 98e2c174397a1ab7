"""p_A quantiles on leaderboard entries

Revision ID: 0003
Revises: 0002
Created: 2026-11-22 08:09:13.838379
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("leaderboard_entries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pa_q10", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("pa_q25", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("pa_q75", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("pa_q90", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("leaderboard_entries", schema=None) as batch_op:
        batch_op.drop_column("pa_q90")
        batch_op.drop_column("pa_q75")
        batch_op.drop_column("pa_q25")
        batch_op.drop_column("pa_q10")
