"""Commit-reveal at merge (issue 11 §1): every stage refuses to merge a shard file that names
another run seed's commitment than the run's, since the revealed seed would not reproduce its
records. Shards are computed by the real tasks; one file's metadata is then rewritten, as a
shard left over from another run (or planted) would read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from certbench.smoothing.records import METADATA_KEY
from models.core.errors import StorageError
from models.core.settings import Settings
from models.db.entities import StageResult, StageShard
from models.runs.results import merge_stage
from models.stages import registry
from models.stages.work import get_work_item
from models.submissions import run_seeds, storage
from tests.support.stages import fresh, submit, write_model_labelled_dataset
from tests.support.workers import (
    load_benchmark,
    tiny_definition,
    tiny_robustness,
    write_tiny_train_split,
)
from tests.workers.test_worker_fourier import tiny_fourier
from workers.names import AGGREGATE

OTHER = run_seeds.commitment("0x" + "ab" * 16)
"""The commitment of a seed that is not the run's."""


def _definition(dataset: Path, stage: str) -> dict[str, Any]:
    """The tiny benchmark with the one stage block under test (certification: none needed)."""
    definition = tiny_definition(dataset)
    if stage == "pd_robustness":
        definition["robustness"] = tiny_robustness(dataset)
    elif stage == "fourier_sensitivity":
        definition["stages"] = {stage: tiny_fourier(dataset, points_per_shard=5)}
    return definition


def _run_shards(worker: Any) -> None:
    """Validate and run every shard, but not the aggregate (the merge is called directly)."""
    while (message := worker.take()) is not None:
        if message.name != AGGREGATE:
            worker.execute(message)


def _rename_commitment(path: Path, commitment: str) -> None:
    """Rewrite a shard file's ``seed_commitment``: JSON metadata (certification, Fourier
    sensitivity) or flat key/value metadata (robustness)."""
    table = pq.read_table(path)
    raw = dict(table.schema.metadata or {})
    if METADATA_KEY in raw:
        document = json.loads(raw[METADATA_KEY])
        assert "seed_commitment" in document
        raw[METADATA_KEY] = json.dumps({**document, "seed_commitment": commitment}).encode()
    else:
        assert b"seed_commitment" in raw
        raw[b"seed_commitment"] = commitment.encode()
    pq.write_table(table.replace_schema_metadata(raw), path)


@pytest.mark.parametrize("stage", ["certification", "pd_robustness", "fourier_sensitivity"])
def test_a_shard_naming_another_commitment_is_not_merged(
    settings: Settings, session: Session, tmp_path: Path, worker: Any, stage: str
) -> None:
    dataset = write_tiny_train_split(write_model_labelled_dataset(tmp_path / "data", seed=5))
    load_benchmark(session, _definition(dataset, stage))
    sid = submit(session, settings, tmp_path)
    _run_shards(worker)
    item = get_work_item(session, sid, settings=settings)
    plugin = registry.get(stage)
    # the untouched shards merge
    assert merge_stage(session, item, plugin, settings=settings).results
    shard = session.scalars(
        select(StageShard)
        .where(StageShard.submission_id == sid, StageShard.stage == stage)
        .order_by(StageShard.shard_index.desc())
    ).first()
    _rename_commitment(storage.resolve(settings.artifacts_dir, shard.records_path), OTHER)
    with pytest.raises(StorageError, match="another run seed") as raised:
        merge_stage(session, item, plugin, settings=settings)
    assert OTHER[:12] in str(raised.value) and item.seed_commitment[:12] in str(raised.value)
    assert session.scalars(select(StageResult).where(StageResult.submission_id == sid)).all() == []
    assert fresh(session, sid).state == "running"
