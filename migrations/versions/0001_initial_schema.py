"""initial schema

Revision ID: 0001
Revises: (none)
Created: 2026-11-22 06:45:55.955274
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import models.db.base

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "artifacts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("manifest", sa.JSON(), nullable=False),
        sa.Column("manifest_sha256", sa.String(length=64), nullable=False),
        sa.Column("weights_path", sa.String(length=512), nullable=True),
        sa.Column("created_at", models.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_artifacts")),
        sa.UniqueConstraint(
            "sha256", "manifest_sha256", name=op.f("uq_artifacts_sha256_manifest_sha256")
        ),
    )
    op.create_table(
        "benchmarks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("title", sa.String(length=128), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("base_dataset", sa.String(length=64), nullable=False),
        sa.Column("num_classes", sa.Integer(), nullable=False),
        sa.Column("sigmas", sa.JSON(), nullable=False),
        sa.Column("definition_version", sa.Integer(), nullable=False),
        sa.Column("definition_sha256", sa.String(length=64), nullable=False),
        sa.Column("protocol_version", sa.String(length=32), nullable=False),
        sa.Column("n0", sa.Integer(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("alpha", sa.Float(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("bands", sa.JSON(), nullable=False),
        sa.Column("created_at", models.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", models.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_benchmarks")),
        sa.UniqueConstraint("name", name=op.f("uq_benchmarks_name")),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("email", sa.String(length=254), nullable=True),
        sa.Column(
            "role",
            sa.Enum("submitter", "admin", name="role", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("is_active", sa.Boolean(), nullable=False),
        sa.Column("created_at", models.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("name", name=op.f("uq_users_name")),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("label", sa.String(length=64), nullable=False),
        sa.Column("created_at", models.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", models.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("expires_at", models.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", models.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_api_tokens_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_tokens_user_id"), ["user_id"], unique=False)

    op.create_table(
        "submissions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("benchmark_id", sa.Integer(), nullable=False),
        sa.Column("artifact_id", sa.Integer(), nullable=False),
        sa.Column(
            "state",
            sa.Enum(
                "submitted",
                "validating",
                "queued",
                "running",
                "finished",
                "failed",
                "rejected",
                "cancelled",
                "duplicate",
                name="submission_state",
                native_enum=False,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("reason", sa.String(length=32), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("is_private", sa.Boolean(), nullable=False),
        sa.Column("hidden", sa.Boolean(), nullable=False),
        sa.Column("flagged", sa.Boolean(), nullable=False),
        sa.Column("flag_reason", sa.Text(), nullable=True),
        sa.Column("is_baseline", sa.Boolean(), nullable=False),
        sa.Column("model_name", sa.String(length=128), nullable=False),
        sa.Column("architecture", sa.String(length=64), nullable=False),
        sa.Column("sigma", sa.Float(), nullable=False),
        sa.Column("extra_data", sa.Boolean(), nullable=False),
        sa.Column("venue", sa.String(length=64), nullable=True),
        sa.Column("protocol_version", sa.String(length=32), nullable=False),
        sa.Column("dedup_key", sa.String(length=64), nullable=False),
        sa.Column("duplicate_of_id", sa.Integer(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("shards_total", sa.Integer(), nullable=False),
        sa.Column("shards_done", sa.Integer(), nullable=False),
        sa.Column("progress", sa.Float(), nullable=False),
        sa.Column("worker", sa.String(length=128), nullable=True),
        sa.Column("created_at", models.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", models.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column("started_at", models.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("finished_at", models.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("heartbeat_at", models.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.Column("lease_expires_at", models.db.base.UTCDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["artifact_id"], ["artifacts.id"], name=op.f("fk_submissions_artifact_id_artifacts")
        ),
        sa.ForeignKeyConstraint(
            ["benchmark_id"], ["benchmarks.id"], name=op.f("fk_submissions_benchmark_id_benchmarks")
        ),
        sa.ForeignKeyConstraint(
            ["duplicate_of_id"],
            ["submissions.id"],
            name=op.f("fk_submissions_duplicate_of_id_submissions"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_submissions_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_submissions")),
    )
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_submissions_artifact_id"), ["artifact_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_submissions_benchmark_id"), ["benchmark_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_submissions_dedup_key"), ["dedup_key"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_submissions_lease_expires_at"), ["lease_expires_at"], unique=False
        )
        batch_op.create_index("ix_submissions_state_id", ["state", "id"], unique=False)
        batch_op.create_index(
            "ix_submissions_user_created", ["user_id", "created_at"], unique=False
        )

    op.create_table(
        "test_sets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("benchmark_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("dataset_repo", sa.String(length=128), nullable=False),
        sa.Column("dataset_folder", sa.String(length=512), nullable=True),
        sa.Column("config", sa.String(length=64), nullable=True),
        sa.Column("revision", sa.String(length=64), nullable=True),
        sa.Column("split", sa.String(length=32), nullable=False),
        sa.Column("subset_skip", sa.Integer(), nullable=False),
        sa.Column("subset_limit", sa.Integer(), nullable=True),
        sa.Column("num_images", sa.Integer(), nullable=False),
        sa.Column("band", sa.String(length=16), nullable=True),
        sa.Column("attributes", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["benchmark_id"],
            ["benchmarks.id"],
            name=op.f("fk_test_sets_benchmark_id_benchmarks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_test_sets")),
        sa.UniqueConstraint("benchmark_id", "name", name=op.f("uq_test_sets_benchmark_id_name")),
    )
    op.create_table(
        "leaderboard_entries",
        sa.Column("submission_id", sa.Integer(), nullable=False),
        sa.Column("benchmark_id", sa.Integer(), nullable=False),
        sa.Column("protocol_version", sa.String(length=32), nullable=False),
        sa.Column("macr", sa.Float(), nullable=False),
        sa.Column("cert_acc_000", sa.Float(), nullable=False),
        sa.Column("cert_acc_025", sa.Float(), nullable=False),
        sa.Column("cert_acc_050", sa.Float(), nullable=False),
        sa.Column("cert_acc_075", sa.Float(), nullable=False),
        sa.Column("cert_acc_100", sa.Float(), nullable=False),
        sa.Column("clean_accuracy", sa.Float(), nullable=False),
        sa.Column("abstain_rate", sa.Float(), nullable=False),
        sa.Column("pa_median", sa.Float(), nullable=False),
        sa.Column("band_low", sa.Float(), nullable=True),
        sa.Column("band_mid", sa.Float(), nullable=True),
        sa.Column("band_high", sa.Float(), nullable=True),
        sa.Column("test_sets", sa.Integer(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("finished_at", models.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["benchmark_id"],
            ["benchmarks.id"],
            name=op.f("fk_leaderboard_entries_benchmark_id_benchmarks"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["submissions.id"],
            name=op.f("fk_leaderboard_entries_submission_id_submissions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("submission_id", name=op.f("pk_leaderboard_entries")),
    )
    with op.batch_alter_table("leaderboard_entries", schema=None) as batch_op:
        batch_op.create_index(
            "ix_leaderboard_entries_benchmark_ca_050",
            ["benchmark_id", "cert_acc_050"],
            unique=False,
        )
        batch_op.create_index(
            "ix_leaderboard_entries_benchmark_macr", ["benchmark_id", "macr"], unique=False
        )

    op.create_table(
        "results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.Integer(), nullable=False),
        sa.Column("test_set_id", sa.Integer(), nullable=False),
        sa.Column("protocol_version", sa.String(length=32), nullable=False),
        sa.Column("evaluator_version", sa.String(length=32), nullable=False),
        sa.Column("acr", sa.Float(), nullable=False),
        sa.Column("certified_accuracy", sa.JSON(), nullable=False),
        sa.Column("clean_accuracy", sa.Float(), nullable=False),
        sa.Column("abstain_rate", sa.Float(), nullable=False),
        sa.Column("pa_median", sa.Float(), nullable=False),
        sa.Column("pa_quantiles", sa.JSON(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("records_path", sa.String(length=512), nullable=False),
        sa.Column("created_at", models.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["submissions.id"],
            name=op.f("fk_results_submission_id_submissions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["test_set_id"],
            ["test_sets.id"],
            name=op.f("fk_results_test_set_id_test_sets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_results")),
        sa.UniqueConstraint(
            "submission_id", "test_set_id", name=op.f("uq_results_submission_id_test_set_id")
        ),
    )
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_results_test_set_id"), ["test_set_id"], unique=False)

    op.create_table(
        "shards",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.Integer(), nullable=False),
        sa.Column("test_set_id", sa.Integer(), nullable=False),
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
            name=op.f("fk_shards_submission_id_submissions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["test_set_id"],
            ["test_sets.id"],
            name=op.f("fk_shards_test_set_id_test_sets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_shards")),
        sa.UniqueConstraint(
            "submission_id",
            "test_set_id",
            "shard_index",
            name=op.f("uq_shards_submission_id_test_set_id_shard_index"),
        ),
    )
    op.create_table(
        "submission_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.Integer(), nullable=False),
        sa.Column("at", models.db.base.UTCDateTime(timezone=True), nullable=False),
        sa.Column(
            "from_state",
            sa.Enum(
                "submitted",
                "validating",
                "queued",
                "running",
                "finished",
                "failed",
                "rejected",
                "cancelled",
                "duplicate",
                name="submission_state",
                native_enum=False,
                length=16,
            ),
            nullable=True,
        ),
        sa.Column(
            "to_state",
            sa.Enum(
                "submitted",
                "validating",
                "queued",
                "running",
                "finished",
                "failed",
                "rejected",
                "cancelled",
                "duplicate",
                name="submission_state",
                native_enum=False,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("reason", sa.String(length=32), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["submissions.id"],
            name=op.f("fk_submission_events_submission_id_submissions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_submission_events")),
    )
    with op.batch_alter_table("submission_events", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_submission_events_submission_id"), ["submission_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("submission_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_submission_events_submission_id"))

    op.drop_table("submission_events")
    op.drop_table("shards")
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_results_test_set_id"))

    op.drop_table("results")
    with op.batch_alter_table("leaderboard_entries", schema=None) as batch_op:
        batch_op.drop_index("ix_leaderboard_entries_benchmark_macr")
        batch_op.drop_index("ix_leaderboard_entries_benchmark_ca_050")

    op.drop_table("leaderboard_entries")
    op.drop_table("test_sets")
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.drop_index("ix_submissions_user_created")
        batch_op.drop_index("ix_submissions_state_id")
        batch_op.drop_index(batch_op.f("ix_submissions_lease_expires_at"))
        batch_op.drop_index(batch_op.f("ix_submissions_dedup_key"))
        batch_op.drop_index(batch_op.f("ix_submissions_benchmark_id"))
        batch_op.drop_index(batch_op.f("ix_submissions_artifact_id"))

    op.drop_table("submissions")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_tokens_user_id"))

    op.drop_table("api_tokens")
    op.drop_table("users")
    op.drop_table("benchmarks")
    op.drop_table("artifacts")
