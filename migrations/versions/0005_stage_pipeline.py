"""evaluation stages as plug-ins: one shard table, one stage-result table, metric values

Carries existing rows over: certify shards and robustness shards become ``stage_shards`` rows
(stages ``certification`` with the test-set name as unit, and ``pd_robustness`` with unit ""),
per-test-set results and robustness results become ``stage_results`` rows (their figures as the
JSON summary), the leaderboard's metric columns become ``metric_values`` rows, and
``benchmarks.robustness`` becomes ``benchmarks.stages["pd_robustness"]``. The downgrade carries
them back.

Revision ID: 0005
Revises: 0004
Created: 2026-11-23 03:08:14.440649
"""

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

import models.db.base

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CERT, PD = "certification", "pd_robustness"
#: Leaderboard metric columns before 0005: key, nullable.
METRICS = {
    "macr": False, "cert_acc_000": False, "cert_acc_025": False, "cert_acc_050": False,
    "cert_acc_075": False, "cert_acc_100": False, "clean_accuracy": False,
    "abstain_rate": False, "pa_median": False, "pa_q10": True, "pa_q25": True, "pa_q75": True,
    "pa_q90": True, "band_low": True, "band_mid": True, "band_high": True,
    "base_accuracy": True, "linf_acc_8": True, "linf_acc_16": True, "pd_acc_8": True,
    "pd_acc_16": True,
}  # fmt: skip
#: Which of them were indexed (benchmark_id, column).
INDEXED = [k for k in METRICS if not k.startswith("pa_q")]
ROBUST_COLUMNS = ("linf_acc_8", "linf_acc_16", "pd_acc_8", "pd_acc_16")
TIME = models.db.base.UTCDateTime(timezone=True)


def _t(name: str, *columns: str, json: Sequence[str] = ()) -> sa.TableClause:
    return sa.table(
        name, *(sa.column(c, sa.JSON() if c in json else None) for c in (*columns, *json))
    )


SHARD_COLS = ("submission_id", "shard_index", "start", "stop", "count", "seconds",
              "records_path", "worker", "created_at")  # fmt: skip
stage_shards = _t("stage_shards", "stage", "unit", *SHARD_COLS)
stage_results = _t(
    "stage_results", "submission_id", "stage", "unit", "evaluator_version", "count", "seconds",
    "records_path", "created_at", json=("protocol", "summary", "seeds", "data_hashes"),
)  # fmt: skip
metric_values = _t("metric_values", "submission_id", "key", "benchmark_id", "stage", "value")
test_sets = _t("test_sets", "id", "name", "benchmark_id")
submissions = _t("submissions", "id", "benchmark_id")


def _create_new_tables() -> None:
    op.create_table(
        "metric_values",
        sa.Column("submission_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=48), nullable=False),
        sa.Column("benchmark_id", sa.Integer(), nullable=False),
        sa.Column("stage", sa.String(length=32), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["benchmark_id"], ["benchmarks.id"],
                                name=op.f("fk_metric_values_benchmark_id_benchmarks"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["submission_id"], ["submissions.id"],
                                name=op.f("fk_metric_values_submission_id_submissions"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("submission_id", "key", name=op.f("pk_metric_values")),
    )  # fmt: skip
    with op.batch_alter_table("metric_values", schema=None) as batch_op:
        batch_op.create_index(
            "ix_metric_values_benchmark_key_value", ["benchmark_id", "key", "value"], unique=False
        )
    op.create_table(
        "stage_results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.Integer(), nullable=False),
        sa.Column("stage", sa.String(length=32), nullable=False),
        sa.Column("unit", sa.String(length=64), nullable=False),
        sa.Column("evaluator_version", sa.String(length=32), nullable=False),
        sa.Column("protocol", sa.JSON(), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.Column("seeds", sa.JSON(), nullable=False),
        sa.Column("data_hashes", sa.JSON(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("records_path", sa.String(length=512), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(["submission_id"], ["submissions.id"],
                                name=op.f("fk_stage_results_submission_id_submissions"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stage_results")),
        sa.UniqueConstraint("submission_id", "stage", "unit",
                            name=op.f("uq_stage_results_submission_id_stage_unit")),
    )  # fmt: skip
    op.create_table(
        "stage_shards",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.Integer(), nullable=False),
        sa.Column("stage", sa.String(length=32), nullable=False),
        sa.Column("unit", sa.String(length=64), nullable=False),
        sa.Column("shard_index", sa.Integer(), nullable=False),
        sa.Column("start", sa.Integer(), nullable=False),
        sa.Column("stop", sa.Integer(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("records_path", sa.String(length=512), nullable=False),
        sa.Column("worker", sa.String(length=128), nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(["submission_id"], ["submissions.id"],
                                name=op.f("fk_stage_shards_submission_id_submissions"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stage_shards")),
        sa.UniqueConstraint("submission_id", "stage", "unit", "shard_index",
                            name=op.f("uq_stage_shards_submission_id_stage_unit_shard_index")),
    )  # fmt: skip


def _create_old_tables() -> None:
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
        sa.Column("created_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(["submission_id"], ["submissions.id"],
                                name=op.f("fk_results_submission_id_submissions"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["test_set_id"], ["test_sets.id"],
                                name=op.f("fk_results_test_set_id_test_sets"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_results")),
        sa.UniqueConstraint("submission_id", "test_set_id",
                            name=op.f("uq_results_submission_id_test_set_id")),
    )  # fmt: skip
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
        sa.Column("created_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(["submission_id"], ["submissions.id"],
                                name=op.f("fk_shards_submission_id_submissions"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["test_set_id"], ["test_sets.id"],
                                name=op.f("fk_shards_test_set_id_test_sets"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_shards")),
        sa.UniqueConstraint("submission_id", "test_set_id", "shard_index",
                            name=op.f("uq_shards_submission_id_test_set_id_shard_index")),
    )  # fmt: skip
    op.create_table(
        "robustness_results",
        sa.Column("submission_id", sa.Integer(), nullable=False),
        sa.Column("evaluator_version", sa.String(length=32), nullable=False),
        sa.Column("protocol", sa.JSON(), nullable=False),
        sa.Column("base_accuracy", sa.Float(), nullable=False),
        *(sa.Column(c, sa.Float(), nullable=True) for c in ROBUST_COLUMNS),
        sa.Column("figures", sa.JSON(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("records_path", sa.String(length=512), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(["submission_id"], ["submissions.id"],
                                name=op.f("fk_robustness_results_submission_id_submissions"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("submission_id", name=op.f("pk_robustness_results")),
    )  # fmt: skip
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
        sa.Column("created_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(["submission_id"], ["submissions.id"],
                                name=op.f("fk_robustness_shards_submission_id_submissions"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_robustness_shards")),
        sa.UniqueConstraint("submission_id", "shard_index",
                            name=op.f("uq_robustness_shards_submission_id_shard_index")),
    )  # fmt: skip


def _drop_column(table: str, column: str) -> None:
    """Drop a plain column in place. On SQLite a batch (copy-and-rename) would have to drop
    ``benchmarks``, which rows of other tables reference: with foreign keys enforced that fails
    once data exists, so use SQLite's own DROP COLUMN (3.35+) there."""
    if op.get_bind().dialect.name == "sqlite":
        op.execute(sa.text(f'ALTER TABLE "{table}" DROP COLUMN "{column}"'))
    else:
        op.drop_column(table, column)


def _rows(query: Any) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in op.get_bind().execute(query)]


def _insert(table: sa.TableClause, rows: list[dict[str, Any]]) -> None:
    if rows:
        op.get_bind().execute(table.insert(), rows)


def upgrade() -> None:
    _create_new_tables()
    old_shards = _t("shards", "test_set_id", *SHARD_COLS)
    rows = _rows(sa.select(old_shards, test_sets.c.name).join(
        test_sets, test_sets.c.id == old_shards.c.test_set_id))  # fmt: skip
    _insert(stage_shards, [{**{c: r[c] for c in SHARD_COLS}, "stage": CERT, "unit": r["name"]}
                           for r in rows])  # fmt: skip
    rows = _rows(sa.select(_t("robustness_shards", *SHARD_COLS)))
    _insert(stage_shards, [{**r, "stage": PD, "unit": ""} for r in rows])

    old_results = _t(
        "results", "submission_id", "test_set_id", "protocol_version", "evaluator_version",
        "acr", "clean_accuracy", "abstain_rate", "pa_median", "count", "seconds",
        "records_path", "created_at", json=("certified_accuracy", "pa_quantiles"),
    )  # fmt: skip
    rows = _rows(sa.select(old_results, test_sets.c.name).join(
        test_sets, test_sets.c.id == old_results.c.test_set_id))  # fmt: skip
    _insert(stage_results, [_certification_result(r) for r in rows])
    old_robust = _t(
        "robustness_results", "submission_id", "evaluator_version", "base_accuracy", "count",
        "seconds", "records_path", "created_at", json=("protocol", "figures"),
    )  # fmt: skip
    _insert(stage_results, [_robustness_result(r) for r in _rows(sa.select(old_robust))])

    entries = _t("leaderboard_entries", "submission_id", "benchmark_id", *METRICS)
    values = []
    for entry in _rows(sa.select(entries)):
        for key in METRICS:
            if key in ("base_accuracy", *ROBUST_COLUMNS) and entry["base_accuracy"] is None:
                continue  # no robustness stage: nothing was measured
            stage = PD if key in ("base_accuracy", *ROBUST_COLUMNS) else CERT
            values.append({"submission_id": entry["submission_id"], "key": key,
                           "benchmark_id": entry["benchmark_id"], "stage": stage,
                           "value": entry[key]})  # fmt: skip
    _insert(metric_values, values)

    op.add_column("benchmarks", sa.Column("stages", sa.JSON(), nullable=True))
    benchmarks = _t("benchmarks", "id", json=("robustness", "stages"))
    for row in _rows(sa.select(benchmarks.c.id, benchmarks.c.robustness)):
        stages = {PD: row["robustness"]} if row["robustness"] is not None else {}
        op.get_bind().execute(
            benchmarks.update().where(benchmarks.c.id == row["id"]).values(stages=stages)
        )
    _drop_column("benchmarks", "robustness")

    op.drop_table("robustness_shards")
    op.drop_table("robustness_results")
    op.drop_table("shards")
    with op.batch_alter_table("results", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_results_test_set_id"))
    op.drop_table("results")
    with op.batch_alter_table("leaderboard_entries", schema=None) as batch_op:
        for key in INDEXED:
            batch_op.drop_index(f"ix_leaderboard_entries_benchmark_{key}")
        for key in METRICS:
            batch_op.drop_column(key)


def _certification_result(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "submission_id": r["submission_id"], "stage": CERT, "unit": r["name"],
        "evaluator_version": r["evaluator_version"], "count": r["count"],
        "seconds": r["seconds"], "records_path": r["records_path"],
        "created_at": r["created_at"], "protocol": {}, "seeds": {}, "data_hashes": {},
        "summary": {
            "acr": r["acr"], "certified_accuracy": r["certified_accuracy"],
            "clean_accuracy": r["clean_accuracy"], "abstain_rate": r["abstain_rate"],
            "pa_median": r["pa_median"], "pa_quantiles": r["pa_quantiles"],
            "protocol_version": r["protocol_version"],
        },
    }  # fmt: skip


def _robustness_result(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "submission_id": r["submission_id"], "stage": PD, "unit": "",
        "evaluator_version": r["evaluator_version"], "count": r["count"],
        "seconds": r["seconds"], "records_path": r["records_path"],
        "created_at": r["created_at"], "protocol": r["protocol"], "seeds": {},
        "data_hashes": {},
        "summary": {"base_accuracy": r["base_accuracy"], "figures": r["figures"]},
    }  # fmt: skip


def downgrade() -> None:
    _create_old_tables()
    with op.batch_alter_table("leaderboard_entries", schema=None) as batch_op:
        for key in METRICS:
            batch_op.add_column(sa.Column(key, sa.Float(), nullable=True))
    entries = _t("leaderboard_entries", "submission_id", *METRICS)
    by_entry: dict[int, dict[str, Any]] = {}
    for row in _rows(sa.select(metric_values).where(metric_values.c.key.in_(list(METRICS)))):
        by_entry.setdefault(row["submission_id"], {})[row["key"]] = row["value"]
    for submission_id, figures in by_entry.items():
        op.get_bind().execute(
            entries.update().where(entries.c.submission_id == submission_id).values(**figures)
        )
    with op.batch_alter_table("leaderboard_entries", schema=None) as batch_op:
        for key, nullable in METRICS.items():
            if not nullable:
                batch_op.alter_column(key, existing_type=sa.Float(), nullable=False)
        for key in INDEXED:
            batch_op.create_index(
                f"ix_leaderboard_entries_benchmark_{key}", ["benchmark_id", key], unique=False
            )

    op.add_column("benchmarks", sa.Column("robustness", sa.JSON(), nullable=True))
    benchmarks = _t("benchmarks", "id", json=("robustness", "stages"))
    for row in _rows(sa.select(benchmarks.c.id, benchmarks.c.stages)):
        robustness = (row["stages"] or {}).get(PD)
        op.get_bind().execute(
            benchmarks.update().where(benchmarks.c.id == row["id"]).values(robustness=robustness)
        )
    _drop_column("benchmarks", "stages")

    _downgrade_rows()
    op.drop_table("stage_shards")
    op.drop_table("stage_results")
    with op.batch_alter_table("metric_values", schema=None) as batch_op:
        batch_op.drop_index("ix_metric_values_benchmark_key_value")
    op.drop_table("metric_values")


def _downgrade_rows() -> None:
    """Rows of the two built-in stages go back to their own tables; other stages' rows cannot
    be represented before 0005 and are dropped with the tables."""
    ids = {(r["benchmark_id"], r["name"]): r["id"] for r in _rows(sa.select(test_sets))}
    bench_of = {r["id"]: r["benchmark_id"] for r in _rows(sa.select(submissions))}
    rows = _rows(sa.select(stage_shards).where(stage_shards.c.stage == CERT))
    _insert(
        _t("shards", "test_set_id", *SHARD_COLS),
        [
            {
                **{c: r[c] for c in SHARD_COLS},
                "test_set_id": ids[(bench_of[r["submission_id"]], r["unit"])],
            }
            for r in rows
        ],
    )
    rows = _rows(sa.select(stage_shards).where(stage_shards.c.stage == PD))
    _insert(_t("robustness_shards", *SHARD_COLS), [{c: r[c] for c in SHARD_COLS} for r in rows])
    results = []
    for r in _rows(sa.select(stage_results).where(stage_results.c.stage == CERT)):
        s = r["summary"]
        results.append({
            "submission_id": r["submission_id"],
            "test_set_id": ids[(bench_of[r["submission_id"]], r["unit"])],
            "protocol_version": s["protocol_version"], "evaluator_version": r["evaluator_version"],
            "acr": s["acr"], "certified_accuracy": s["certified_accuracy"],
            "clean_accuracy": s["clean_accuracy"], "abstain_rate": s["abstain_rate"],
            "pa_median": s["pa_median"], "pa_quantiles": s["pa_quantiles"], "count": r["count"],
            "seconds": r["seconds"], "records_path": r["records_path"],
            "created_at": r["created_at"] or datetime.now(UTC),
        })  # fmt: skip
    _insert(_t("results", "submission_id", "test_set_id", "protocol_version",
               "evaluator_version", "acr", "clean_accuracy", "abstain_rate", "pa_median",
               "count", "seconds", "records_path", "created_at",
               json=("certified_accuracy", "pa_quantiles")), results)  # fmt: skip
    robust = []
    for r in _rows(sa.select(stage_results).where(stage_results.c.stage == PD)):
        figures = r["summary"]["figures"]
        columns = {f"{kind}_acc_{eps}": figures.get(f"{kind}_robust_accuracy_{eps}")
                   for kind in ("linf", "pd") for eps in (8, 16)}  # fmt: skip
        robust.append({
            "submission_id": r["submission_id"], "evaluator_version": r["evaluator_version"],
            "protocol": r["protocol"], "base_accuracy": r["summary"]["base_accuracy"],
            "figures": figures, "count": r["count"], "seconds": r["seconds"],
            "records_path": r["records_path"], "created_at": r["created_at"], **columns,
        })  # fmt: skip
    _insert(_t("robustness_results", "submission_id", "evaluator_version", "base_accuracy",
               *ROBUST_COLUMNS, "count", "seconds", "records_path", "created_at",
               json=("protocol", "figures")), robust)  # fmt: skip
