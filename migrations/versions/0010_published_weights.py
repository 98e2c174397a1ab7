"""model zoo: submitters may publish an entry's weights under a licence

Adds ``submissions.weights_public`` (false for every existing submission: nothing becomes
downloadable by this migration) and ``submissions.weights_license`` (an SPDX identifier from
``certbench.data.licenses``, null until the submitter chooses one).

Revision ID: 0010
Revises: 0009
Created: 2026-12-09 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # In place (not a batch copy): ``submissions`` is referenced by other tables' rows.
    op.add_column(
        "submissions",
        sa.Column("weights_public", sa.Boolean(), nullable=False, server_default=sa.text("false")),
    )
    op.add_column("submissions", sa.Column("weights_license", sa.String(length=32), nullable=True))


def downgrade() -> None:
    # SQLite drops a column in place too (3.35+), rather than copying a referenced table.
    for column in ("weights_license", "weights_public"):
        if op.get_bind().dialect.name == "sqlite":
            op.execute(sa.text(f'ALTER TABLE "submissions" DROP COLUMN "{column}"'))
        else:
            op.drop_column("submissions", column)
