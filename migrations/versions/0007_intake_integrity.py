"""intake integrity: shared weights files as lockable rows, dedup enforced by a unique index

Revision ID: 0007
Revises: 0006
Created: 2026-12-02 09:00:00

``weights_files`` gets one row per stored weights content (backfilled from the artifacts that
still have a file). Submissions get a partial unique index: one live or finished original per
dedup key. Originals that a racing intake created twice before this migration are resolved
first: the oldest stays, the later ones become ``duplicate`` of it (their results were computed
on identical weights, manifest and protocol).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import models.db.base

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LIVE = "state IN ('finished', 'queued', 'running', 'submitted', 'validating')"


def upgrade() -> None:
    op.create_table(
        "weights_files",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("stored", sa.Boolean(), nullable=False),
        sa.Column("created_at", models.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_weights_files")),
    )
    op.execute(
        "INSERT INTO weights_files (sha256, size_bytes, stored, created_at) "
        "SELECT sha256, MAX(size_bytes), TRUE, MIN(created_at) FROM artifacts "
        "WHERE weights_path IS NOT NULL GROUP BY sha256"
    )
    _resolve_duplicate_originals()
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.create_index(
            "uq_submissions_live_dedup_key",
            ["dedup_key"],
            unique=True,
            postgresql_where=sa.text(LIVE),
            sqlite_where=sa.text(LIVE),
        )


def _resolve_duplicate_originals() -> None:
    """Later live originals of a dedup key become duplicates of its oldest one."""
    connection = op.get_bind()
    rows = connection.execute(
        sa.text(
            f"SELECT id, dedup_key FROM submissions WHERE {LIVE} AND dedup_key IN ("
            f"SELECT dedup_key FROM submissions WHERE {LIVE} GROUP BY dedup_key "
            "HAVING COUNT(*) > 1) ORDER BY dedup_key, id"
        )
    ).all()
    oldest: dict[str, int] = {}
    for submission_id, key in rows:
        original = oldest.setdefault(key, submission_id)
        if original == submission_id:
            continue
        connection.execute(
            sa.text(
                "UPDATE submissions SET state = 'duplicate', reason = 'duplicate', "
                "duplicate_of_id = :original, lease_expires_at = NULL, "
                "message = :message WHERE id = :id"
            ),
            {
                "original": original,
                "id": submission_id,
                "message": "identical to an earlier submission (same weights, manifest and "
                "protocol); resolved by migration 0007",
            },
        )
        connection.execute(
            sa.text("DELETE FROM leaderboard_entries WHERE submission_id = :id"),
            {"id": submission_id},
        )


def downgrade() -> None:
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.drop_index("uq_submissions_live_dedup_key")
    op.drop_table("weights_files")
