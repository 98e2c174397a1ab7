"""leaderboard read model: one row per entry with its figures and display card

Creates ``leaderboard_rows`` (``models.boards.read_model``): each finished entry's figures (its
``metric_values`` by key, as one JSON object) and card (the manifest's authors, paper and code
links; the weights file's SHA-256 and size), and fills it for every entry already on a
leaderboard, so pages read one row per entry instead of one per figure.

Self-contained (table definitions here, not the ORM), so later model changes cannot alter what
this step did.

Revision ID: 0011
Revises: 0010
Created: 2026-11-27 22:30:00
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 500

entries = sa.table("leaderboard_entries", sa.column("submission_id", sa.Integer))
metric_values = sa.table(
    "metric_values",
    sa.column("submission_id", sa.Integer),
    sa.column("key", sa.String),
    sa.column("value", sa.Float),
)
submissions = sa.table(
    "submissions",
    sa.column("id", sa.Integer),
    sa.column("benchmark_id", sa.Integer),
    sa.column("artifact_id", sa.Integer),
)
artifacts = sa.table(
    "artifacts",
    sa.column("id", sa.Integer),
    sa.column("manifest", sa.JSON),
    sa.column("sha256", sa.String),
    sa.column("size_bytes", sa.BigInteger),
)
rows_table = sa.table(
    "leaderboard_rows",
    sa.column("submission_id", sa.Integer),
    sa.column("benchmark_id", sa.Integer),
    sa.column("figures", sa.JSON),
    sa.column("card", sa.JSON),
)


def upgrade() -> None:
    op.create_table(
        "leaderboard_rows",
        sa.Column("submission_id", sa.Integer(), nullable=False),
        sa.Column("benchmark_id", sa.Integer(), nullable=False),
        sa.Column("figures", sa.JSON(), nullable=False),
        sa.Column("card", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["benchmark_id"], ["benchmarks.id"],
                                name=op.f("fk_leaderboard_rows_benchmark_id_benchmarks"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["submission_id"], ["submissions.id"],
                                name=op.f("fk_leaderboard_rows_submission_id_submissions"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("submission_id", name=op.f("pk_leaderboard_rows")),
    )  # fmt: skip
    with op.batch_alter_table("leaderboard_rows", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_leaderboard_rows_benchmark_id"), ["benchmark_id"], unique=False
        )
    backfill(op.get_bind())


def backfill(connection: sa.Connection) -> None:
    """A row for every entry already on a leaderboard, in batches."""
    ids = list(connection.scalars(sa.select(entries.c.submission_id).order_by("submission_id")))
    for start in range(0, len(ids), BATCH):
        chunk = ids[start : start + BATCH]
        figures: dict[int, dict[str, Any]] = {i: {} for i in chunk}
        for submission_id, key, value in connection.execute(
            sa.select(metric_values.c.submission_id, metric_values.c.key, metric_values.c.value)
            .where(metric_values.c.submission_id.in_(chunk))
        ):  # fmt: skip
            figures[submission_id][key] = value
        rows = [
            {
                "submission_id": submission_id,
                "benchmark_id": benchmark_id,
                "figures": dict(sorted(figures[submission_id].items())),
                "card": _card(manifest or {}, sha256, size_bytes),
            }
            for submission_id, benchmark_id, manifest, sha256, size_bytes in connection.execute(
                sa.select(
                    submissions.c.id,
                    submissions.c.benchmark_id,
                    artifacts.c.manifest,
                    artifacts.c.sha256,
                    artifacts.c.size_bytes,
                )
                .join(artifacts, artifacts.c.id == submissions.c.artifact_id)
                .where(submissions.c.id.in_(chunk))
            )
        ]
        if rows:
            connection.execute(sa.insert(rows_table), rows)


def _card(manifest: dict[str, Any], sha256: str, size_bytes: int) -> dict[str, Any]:
    metadata = manifest.get("metadata") or {}
    return {
        "authors": list(metadata.get("authors") or []),
        "paper_url": metadata.get("paper_url"),
        "code_url": metadata.get("code_url"),
        "sha256": sha256,
        "size_bytes": size_bytes,
    }


def downgrade() -> None:
    with op.batch_alter_table("leaderboard_rows", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_leaderboard_rows_benchmark_id"))
    op.drop_table("leaderboard_rows")
