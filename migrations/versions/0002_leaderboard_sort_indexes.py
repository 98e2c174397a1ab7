"""leaderboard sort indexes

Revision ID: 0002
Revises: 0001
Created: 2026-11-22 07:56:13.916804
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("leaderboard_entries", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_leaderboard_entries_benchmark_ca_050"))
        batch_op.create_index(
            "ix_leaderboard_entries_benchmark_abstain_rate",
            ["benchmark_id", "abstain_rate"],
            unique=False,
        )
        batch_op.create_index(
            "ix_leaderboard_entries_benchmark_band_high",
            ["benchmark_id", "band_high"],
            unique=False,
        )
        batch_op.create_index(
            "ix_leaderboard_entries_benchmark_band_low", ["benchmark_id", "band_low"], unique=False
        )
        batch_op.create_index(
            "ix_leaderboard_entries_benchmark_band_mid", ["benchmark_id", "band_mid"], unique=False
        )
        batch_op.create_index(
            "ix_leaderboard_entries_benchmark_cert_acc_000",
            ["benchmark_id", "cert_acc_000"],
            unique=False,
        )
        batch_op.create_index(
            "ix_leaderboard_entries_benchmark_cert_acc_025",
            ["benchmark_id", "cert_acc_025"],
            unique=False,
        )
        batch_op.create_index(
            "ix_leaderboard_entries_benchmark_cert_acc_050",
            ["benchmark_id", "cert_acc_050"],
            unique=False,
        )
        batch_op.create_index(
            "ix_leaderboard_entries_benchmark_cert_acc_075",
            ["benchmark_id", "cert_acc_075"],
            unique=False,
        )
        batch_op.create_index(
            "ix_leaderboard_entries_benchmark_cert_acc_100",
            ["benchmark_id", "cert_acc_100"],
            unique=False,
        )
        batch_op.create_index(
            "ix_leaderboard_entries_benchmark_clean_accuracy",
            ["benchmark_id", "clean_accuracy"],
            unique=False,
        )
        batch_op.create_index(
            "ix_leaderboard_entries_benchmark_finished_at",
            ["benchmark_id", "finished_at"],
            unique=False,
        )
        batch_op.create_index(
            "ix_leaderboard_entries_benchmark_pa_median",
            ["benchmark_id", "pa_median"],
            unique=False,
        )

    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.create_index(
            "ix_submissions_benchmark_created", ["benchmark_id", "created_at"], unique=False
        )
        batch_op.create_index(
            "ix_submissions_benchmark_model_name", ["benchmark_id", "model_name"], unique=False
        )
        batch_op.create_index(
            "ix_submissions_benchmark_sigma", ["benchmark_id", "sigma"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.drop_index("ix_submissions_benchmark_sigma")
        batch_op.drop_index("ix_submissions_benchmark_model_name")
        batch_op.drop_index("ix_submissions_benchmark_created")

    with op.batch_alter_table("leaderboard_entries", schema=None) as batch_op:
        batch_op.drop_index("ix_leaderboard_entries_benchmark_pa_median")
        batch_op.drop_index("ix_leaderboard_entries_benchmark_finished_at")
        batch_op.drop_index("ix_leaderboard_entries_benchmark_clean_accuracy")
        batch_op.drop_index("ix_leaderboard_entries_benchmark_cert_acc_100")
        batch_op.drop_index("ix_leaderboard_entries_benchmark_cert_acc_075")
        batch_op.drop_index("ix_leaderboard_entries_benchmark_cert_acc_050")
        batch_op.drop_index("ix_leaderboard_entries_benchmark_cert_acc_025")
        batch_op.drop_index("ix_leaderboard_entries_benchmark_cert_acc_000")
        batch_op.drop_index("ix_leaderboard_entries_benchmark_band_mid")
        batch_op.drop_index("ix_leaderboard_entries_benchmark_band_low")
        batch_op.drop_index("ix_leaderboard_entries_benchmark_band_high")
        batch_op.drop_index("ix_leaderboard_entries_benchmark_abstain_rate")
        batch_op.create_index(
            batch_op.f("ix_leaderboard_entries_benchmark_ca_050"),
            ["benchmark_id", "cert_acc_050"],
            unique=False,
        )
