"""intake: a table of refused uploads, for the per-user rate limit of refusals

Uploads refused by the API's cheap checks create no submission, so no quota saw them (issue 27
§2: a 24-byte upload declaring a large network cost the API seconds and hundreds of MB, over and
over). ``upload_refusals`` holds one row per refusal (user, time, code), read by
``models.submissions.refusals`` over a sliding window and pruned as it goes.

Revision ID: 0012
Revises: 0011
Created: 2026-11-27 22:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from models.db.base import UTCDateTime

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "upload_refusals",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("code", sa.String(length=32), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_upload_refusals_user_at", "upload_refusals", ["user_id", "at"])


def downgrade() -> None:
    op.drop_index("ix_upload_refusals_user_at", table_name="upload_refusals")
    op.drop_table("upload_refusals")
