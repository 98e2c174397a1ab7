"""commit-reveal run seeds and pinned test-set data

Adds ``run_seeds`` (one row per submission: the noise seed of its current run, ``secret`` and
committed, or ``public``) and ``test_sets.provenance`` (generator, protocol, source and content
hash a benchmark definition pins). Every submission that exists before this migration ran (or
will run) with its benchmark's public seed: it gets a ``public`` row with that seed, so old
results stay readable and say so.

Revision ID: 0008
Revises: 0007
Created: 2026-11-24 10:00:00
"""

import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

import models.db.base

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    run_seeds = op.create_table(
        "run_seeds",
        sa.Column("submission_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("seed", sa.String(length=80), nullable=False),
        sa.Column("commitment", sa.String(length=64), nullable=False),
        sa.Column("drawn_at", models.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["submission_id"], ["submissions.id"],
                                name=op.f("fk_run_seeds_submission_id_submissions"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("submission_id", name=op.f("pk_run_seeds")),
    )  # fmt: skip
    # In place (not a batch copy): ``test_sets`` is referenced by other tables' rows.
    op.add_column(
        "test_sets",
        sa.Column("provenance", sa.JSON(), nullable=False, server_default=sa.text("'{}'")),
    )
    submissions = sa.table("submissions", sa.column("id"), sa.column("benchmark_id"))
    benchmarks = sa.table("benchmarks", sa.column("id"), sa.column("seed"))
    bind = op.get_bind()
    rows = bind.execute(
        sa.select(submissions.c.id, benchmarks.c.seed).join(
            benchmarks, benchmarks.c.id == submissions.c.benchmark_id
        )
    ).all()
    now = datetime.now(UTC)
    if rows:
        op.bulk_insert(
            run_seeds,
            [
                {
                    "submission_id": submission_id,
                    "kind": "public",
                    "seed": str(seed or 0),
                    "commitment": hashlib.sha256(str(seed or 0).encode("ascii")).hexdigest(),
                    "drawn_at": now,
                }
                for submission_id, seed in rows
            ],
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute(sa.text('ALTER TABLE "test_sets" DROP COLUMN "provenance"'))
    else:
        op.drop_column("test_sets", "provenance")
    op.drop_table("run_seeds")
