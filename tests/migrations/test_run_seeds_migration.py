"""Migration 0008: submissions that exist before commit-reveal keep working and are marked as
run with their benchmark's public seed; test sets get an empty provenance; and back again."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import sqlalchemy as sa

import migrations
from models.db.engine import create_db_engine, session_scope
from models.db.entities import Submission
from models.stages.work import get_work_item
from models.submissions import run_seeds
from tests.migrations.test_stage_migration import NOW, _fill, _read
from tests.support.service_db import BACKENDS, service_settings


def _seed_0006(engine: sa.Engine) -> None:
    meta = sa.MetaData()
    meta.reflect(engine)
    t = meta.tables
    rows = [
        ("users", {"id": 1, "name": "alice", "role": "submitter"}),
        (
            "benchmarks",
            {
                "id": 1,
                "name": "b",
                "num_classes": 10,
                "sigmas": [0.25],
                "seed": 7,
                "bands": {},
                "stages": {},
            },
        ),
        (
            "test_sets",
            {
                "id": 5,
                "benchmark_id": 1,
                "name": "set0",
                "position": 0,
                "dataset_repo": "org/b",
                "num_images": 2,
                "attributes": {},
            },
        ),
        ("artifacts", {"id": 1, "sha256": "a" * 64, "manifest": {}, "manifest_sha256": "b"}),
        (
            "submissions",
            {
                "id": 9,
                "user_id": 1,
                "benchmark_id": 1,
                "artifact_id": 1,
                "state": "finished",
                "sigma": 0.25,
                "created_at": NOW,
            },
        ),
    ]
    with engine.begin() as db:
        for name, values in rows:
            db.execute(t[name].insert().values(**_fill(t[name], values)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_0008_marks_existing_runs_public_and_goes_back(backend: str, tmp_path: Path):
    with service_settings(backend, tmp_path, migrate=False) as settings:
        migrations.upgrade(settings, "0007")
        engine = create_db_engine(settings.database_url, pooled=False)
        try:
            _seed_0006(engine)
            migrations.upgrade(settings)
            commitment = hashlib.sha256(b"7").hexdigest()
            assert _read(engine, "run_seeds", "submission_id", "kind", "seed", "commitment") == [
                (9, "public", "7", commitment)
            ]
            assert _read(engine, "test_sets", "id", "provenance") == [(5, {})]
            with session_scope(settings) as session:
                submission = session.get(Submission, 9)
                view = run_seeds.view(session, submission)
                assert (view.kind, view.value, view.revealed) == ("public", "7", True)
                item = get_work_item(session, 9, settings=settings)
                assert (item.seed, item.seed_kind, item.seed_text) == (7, "public", "7")
            migrations.downgrade(settings, "0007")
            assert "run_seeds" not in sa.inspect(engine).get_table_names()
            columns = {c["name"] for c in sa.inspect(engine).get_columns("test_sets")}
            assert "provenance" not in columns
        finally:
            engine.dispose()
