"""submissions: the network's FLOPs per noise sample, counted at intake

Intake counts the declared network's FLOPs per sample on the ``meta`` device
(``certbench.nets.cost``; ``models.benchmarks.limits.check_cost``); the submission keeps the
figure so that its ETA scales this fleet's measured FLOP rate to its own network
(``models.runs.estimates.for_network``). NULL for submissions made before: their ETA uses the
fleet's samples per second, as before.

Revision ID: 0015
Revises: 0014
Created: 2026-12-07 14:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("submissions", sa.Column("flops_per_sample", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    # SQLite drops a column in place (3.35+): a batch copy of the table would drop "submissions",
    # which other tables reference (refused with foreign keys on).
    if op.get_bind().dialect.name == "sqlite":
        op.execute(sa.text('ALTER TABLE "submissions" DROP COLUMN "flops_per_sample"'))
    else:
        op.drop_column("submissions", "flops_per_sample")
