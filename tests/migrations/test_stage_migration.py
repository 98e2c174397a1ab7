"""Migration 0005 carries rows over: certify and robustness shards, per-test-set and robustness
results, leaderboard figures and the benchmark's robustness protocol go into the stage tables
and back again on downgrade, on SQLite and on the real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import migrations
from models.db.engine import create_db_engine
from tests.support.service_db import BACKENDS, service_settings

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
ROBUSTNESS = {"repo": "uoft-cs/cifar10", "anchors": "a.safetensors", "eps": [8, 16],
              "num_images": 2, "k": 50}  # fmt: skip
CERTIFIED = {"acr": 0.4, "certified_accuracy": {"0": 0.7, "0.25": 0.5, "0.5": 0.3, "0.75": 0.1,
             "1": 0.0}, "clean_accuracy": 0.7, "abstain_rate": 0.1, "pa_median": 0.8,
             "pa_quantiles": {"0.1": 0.2, "0.25": 0.5, "0.75": 0.9, "0.9": 0.95}}  # fmt: skip
FIGURES = {"clean_accuracy": 1.0, "count": 2.0, "linf_robust_accuracy_8": 0.5,
           "pd_robust_accuracy_8": 1.0, "linf_pd_threat_median_8": None}  # fmt: skip
METRICS = {"macr": 0.4, "cert_acc_000": 0.7, "cert_acc_025": 0.5, "cert_acc_050": 0.3,
           "cert_acc_075": 0.1, "cert_acc_100": 0.0, "clean_accuracy": 0.7, "abstain_rate": 0.1,
           "pa_median": 0.8, "pa_q10": 0.2, "pa_q25": 0.5, "pa_q75": 0.9, "pa_q90": 0.95,
           "band_low": 0.4, "band_mid": None, "band_high": None, "base_accuracy": 1.0,
           "linf_acc_8": 0.5, "linf_acc_16": None, "pd_acc_8": 1.0, "pd_acc_16": None}  # fmt: skip


def _fill(table: sa.Table, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` plus a plausible value for every other NOT NULL column without a default."""
    row = dict(values)
    for column in table.columns:
        if column.name in row or column.nullable or column.primary_key:
            continue
        kind = column.type.python_type if hasattr(column.type, "python_type") else str
        try:
            kind = column.type.python_type
        except NotImplementedError:
            kind = dict
        row[column.name] = {int: 0, float: 0.0, bool: False, str: "x", datetime: NOW,
                            dict: {}, list: []}.get(kind, "x")  # fmt: skip
    return row


def _seed_0004(engine: sa.Engine) -> None:
    meta = sa.MetaData()
    meta.reflect(engine)
    t = meta.tables
    with engine.begin() as db:
        rows = [
            ("users", {"id": 1, "name": "alice", "role": "submitter"}),
            ("benchmarks", {"id": 1, "name": "b", "robustness": ROBUSTNESS, "num_classes": 10,
                            "sigmas": [0.25], "bands": {"low": ["set0"]}}),
            ("benchmarks", {"id": 2, "name": "plain", "robustness": None, "num_classes": 10,
                            "sigmas": [0.25], "bands": {}}),
            ("test_sets", {"id": 5, "benchmark_id": 1, "name": "set0", "position": 0,
                           "num_images": 2, "attributes": {}}),
            ("artifacts", {"id": 1, "sha256": "a" * 64, "manifest": {}, "manifest_sha256": "b"}),
            ("submissions", {"id": 9, "user_id": 1, "benchmark_id": 1, "artifact_id": 1,
                             "state": "finished", "sigma": 0.25}),
            ("shards", {"submission_id": 9, "test_set_id": 5, "shard_index": 0, "start": 0,
                        "stop": 2, "count": 2, "seconds": 1.0,
                        "records_path": "records/9/set0/shard-00000.parquet", "worker": "w",
                        "created_at": NOW}),
            ("robustness_shards", {"submission_id": 9, "shard_index": 0, "start": 0, "stop": 2,
                                   "count": 2, "seconds": 3.0, "worker": "w",
                                   "records_path": "records/9/_robustness/shard-00000.parquet",
                                   "created_at": NOW}),
            ("results", {"submission_id": 9, "test_set_id": 5, "protocol_version": "v1",
                         "evaluator_version": "0.1.0", **CERTIFIED, "count": 2, "seconds": 1.0,
                         "records_path": "records/9/set0.parquet", "created_at": NOW}),
            ("robustness_results", {"submission_id": 9, "evaluator_version": "0.1.0",
                                    "protocol": {**ROBUSTNESS, "anchors_sha256": "c" * 64},
                                    "base_accuracy": 1.0, "linf_acc_8": 0.5, "pd_acc_8": 1.0,
                                    "figures": FIGURES, "count": 2, "seconds": 3.0,
                                    "records_path": "records/9/_robustness.parquet",
                                    "created_at": NOW}),
            ("leaderboard_entries", {"submission_id": 9, "benchmark_id": 1,
                                     "protocol_version": "v1", **METRICS, "test_sets": 1,
                                     "count": 2, "seconds": 1.0, "finished_at": NOW}),
        ]  # fmt: skip
        for name, values in rows:
            db.execute(t[name].insert().values(**_fill(t[name], values)))


def _read(engine: sa.Engine, name: str, *columns: str) -> list[tuple[Any, ...]]:
    meta = sa.MetaData()
    table = sa.Table(name, meta, autoload_with=engine)
    with engine.connect() as db:
        return [tuple(r) for r in db.execute(sa.select(*(table.c[c] for c in columns)))]


@pytest.mark.parametrize("backend", BACKENDS)
def test_0005_carries_rows_over_and_back(backend: str, tmp_path: Path):
    with service_settings(backend, tmp_path, migrate=False) as settings:
        migrations.upgrade(settings, "0004")
        engine = create_db_engine(settings.database_url, pooled=False)
        try:
            _seed_0004(engine)
            before = {
                "results": _read(engine, "results", "test_set_id", "acr", "certified_accuracy",
                                 "pa_quantiles", "records_path"),
                "robust": _read(engine, "robustness_results", "base_accuracy", "pd_acc_8",
                                "figures", "protocol"),
                "entries": _read(engine, "leaderboard_entries", "submission_id", *METRICS),
                "shards": _read(engine, "shards", "test_set_id", "shard_index", "records_path"),
                "rshards": _read(engine, "robustness_shards", "shard_index", "records_path"),
                "benchmarks": _read(engine, "benchmarks", "id", "robustness"),
            }  # fmt: skip
            migrations.upgrade(settings)

            shards = _read(engine, "stage_shards", "stage", "unit", "shard_index", "records_path")
            assert sorted(shards) == [
                ("certification", "set0", 0, "records/9/set0/shard-00000.parquet"),
                ("pd_robustness", "", 0, "records/9/_robustness/shard-00000.parquet"),
            ]
            results = {(r[0], r[1]): r[2] for r in _read(engine, "stage_results", "stage", "unit",
                                                           "summary")}  # fmt: skip
            assert results[("certification", "set0")] == {**CERTIFIED, "protocol_version": "v1"}
            assert results[("pd_robustness", "")] == {"base_accuracy": 1.0, "figures": FIGURES}
            values = dict(_read(engine, "metric_values", "key", "value"))
            assert values == METRICS  # every figure, None where it was not measured
            stages = dict(_read(engine, "benchmarks", "id", "stages"))
            assert stages == {1: {"pd_robustness": ROBUSTNESS}, 2: {}}

            migrations.downgrade(settings, "0004")
            after = {
                "results": _read(engine, "results", "test_set_id", "acr", "certified_accuracy",
                                 "pa_quantiles", "records_path"),
                "robust": _read(engine, "robustness_results", "base_accuracy", "pd_acc_8",
                                "figures", "protocol"),
                "entries": _read(engine, "leaderboard_entries", "submission_id", *METRICS),
                "shards": _read(engine, "shards", "test_set_id", "shard_index", "records_path"),
                "rshards": _read(engine, "robustness_shards", "shard_index", "records_path"),
                "benchmarks": _read(engine, "benchmarks", "id", "robustness"),
            }  # fmt: skip
            assert after == before
        finally:
            engine.dispose()
