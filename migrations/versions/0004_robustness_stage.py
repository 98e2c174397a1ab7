"""robustness stage: PD threat results, their shards, and leaderboard columns

Revision ID: 0004
Revises: 0003
Created: 2026-11-22 09:24:50.534163
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import models.db.base

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "robustness_results",
        sa.Column("submission_id", sa.Integer(), nullable=False),
        sa.Column("evaluator_version", sa.String(length=32), nullable=False),
        sa.Column("protocol", sa.JSON(), nullable=False),
        sa.Column("base_accuracy", sa.Float(), nullable=False),
        sa.Column("linf_acc_8", sa.Float(), nullable=True),
        sa.Column("linf_acc_16", sa.Float(), nullable=True),
        sa.Column("pd_acc_8", sa.Float(), nullable=True),
        sa.Column("pd_acc_16", sa.Float(), nullable=True),
        sa.Column("figures", sa.JSON(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("records_path", sa.String(length=512), nullable=False),
        sa.Column("created_at", models.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["submissions.id"],
            name=op.f("fk_robustness_results_submission_id_submissions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("submission_id", name=op.f("pk_robustness_results")),
    )
    op.create_table(
        "robustness_shards",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.Integer(), nullable=False),
        sa.Column("shard_index", sa.Integer(), nullable=False),
        sa.Column("start", sa.Integer(), nullable=False),
        sa.Column("stop", sa.Integer(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("records_path", sa.String(length=512), nullable=False),
        sa.Column("worker", sa.String(length=128), nullable=True),
        sa.Column("created_at", models.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["submissions.id"],
            name=op.f("fk_robustness_shards_submission_id_submissions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_robustness_shards")),
        sa.UniqueConstraint(
            "submission_id",
            "shard_index",
            name=op.f("uq_robustness_shards_submission_id_shard_index"),
        ),
    )
    with op.batch_alter_table("benchmarks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("robustness", sa.JSON(), nullable=True))

    with op.batch_alter_table("leaderboard_entries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("base_accuracy", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("linf_acc_8", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("linf_acc_16", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("pd_acc_8", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("pd_acc_16", sa.Float(), nullable=True))
        batch_op.create_index(
            "ix_leaderboard_entries_benchmark_base_accuracy",
            ["benchmark_id", "base_accuracy"],
            unique=False,
        )
        batch_op.create_index(
            "ix_leaderboard_entries_benchmark_linf_acc_16",
            ["benchmark_id", "linf_acc_16"],
            unique=False,
        )
        batch_op.create_index(
            "ix_leaderboard_entries_benchmark_linf_acc_8",
            ["benchmark_id", "linf_acc_8"],
            unique=False,
        )
        batch_op.create_index(
            "ix_leaderboard_entries_benchmark_pd_acc_16",
            ["benchmark_id", "pd_acc_16"],
            unique=False,
        )
        batch_op.create_index(
            "ix_leaderboard_entries_benchmark_pd_acc_8", ["benchmark_id", "pd_acc_8"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("leaderboard_entries", schema=None) as batch_op:
        batch_op.drop_index("ix_leaderboard_entries_benchmark_pd_acc_8")
        batch_op.drop_index("ix_leaderboard_entries_benchmark_pd_acc_16")
        batch_op.drop_index("ix_leaderboard_entries_benchmark_linf_acc_8")
        batch_op.drop_index("ix_leaderboard_entries_benchmark_linf_acc_16")
        batch_op.drop_index("ix_leaderboard_entries_benchmark_base_accuracy")
        batch_op.drop_column("pd_acc_16")
        batch_op.drop_column("pd_acc_8")
        batch_op.drop_column("linf_acc_16")
        batch_op.drop_column("linf_acc_8")
        batch_op.drop_column("base_accuracy")

    with op.batch_alter_table("benchmarks", schema=None) as batch_op:
        batch_op.drop_column("robustness")

    op.drop_table("robustness_shards")
    op.drop_table("robustness_results")
