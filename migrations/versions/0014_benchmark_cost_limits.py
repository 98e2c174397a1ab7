"""benchmarks: caps on a submitted network (parameters, FLOPs per sample)

A benchmark definition may cap the networks it accepts (``limits``: ``max_parameters``,
``max_flops_per_sample``; ``models.benchmarks.definitions.CostLimits``), checked at intake on the
network built on the ``meta`` device. NULL for benchmarks loaded before: the defaults apply.

Revision ID: 0014
Revises: 0013
Created: 2026-12-02 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("benchmarks", sa.Column("limits", sa.JSON(), nullable=True))


def downgrade() -> None:
    # SQLite drops a column in place (3.35+): a batch copy of the table would drop "benchmarks",
    # which other tables reference (refused with foreign keys on).
    if op.get_bind().dialect.name == "sqlite":
        op.execute(sa.text('ALTER TABLE "benchmarks" DROP COLUMN "limits"'))
    else:
        op.drop_column("benchmarks", "limits")
