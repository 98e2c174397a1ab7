"""The stage contract's shard plumbing (``models.stages.shard_files``), without a database: shard
files read back in image order, refused when they name another run seed's commitment, another
protocol or other data; the metadata a shard file and a merged file carry; figure keys declared
to the leaderboard entries by the stage registry; the toy stage the architecture page shows.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from models.core.errors import StorageError
from models.db.entities import LeaderboardEntry, declare_figures, known_figures
from models.db.states import SubmissionState
from models.stages import registry
from models.stages.base import MergeContext, RecordedShard
from models.stages.shard_files import (
    in_order,
    json_table,
    read_shards,
    shard_metadata,
    write_json_table,
)
from models.stages.work import WorkItem
from models.submissions.run_seeds import commitment, seed_text

ROOT = Path(__file__).resolve().parents[2]
SEED = 0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF0
HASHES = {"sha256": "ab" * 32, "source": "local Hub-layout folder", "verified": "unpinned"}


def _item(kind: str = "secret") -> WorkItem:
    return WorkItem(
        submission_id=7,
        state=SubmissionState.RUNNING,
        attempt=1,
        benchmark="tiny",
        num_classes=10,
        sigma=0.25,
        n0=4,
        n=16,
        alpha=0.001,
        seed=SEED,
        protocol_version="1",
        manifest={},
        weights_path=None,
        test_sets=(),
        seed_commitment=commitment(seed_text(SEED)) if kind == "secret" else "",
        seed_kind=kind,
    )


def _shard(
    folder: Path, unit: str, start: int, stop: int, metadata: dict[str, Any]
) -> RecordedShard:
    """A shard file of images ``[start, stop)`` whose values are their indices."""
    path = folder / unit / f"shard-{start:04d}.parquet"
    table = pa.table({"index": list(range(start, stop))})
    write_json_table(table, path, metadata)
    return RecordedShard(unit, start // 2, start, stop, stop - start, 0.5 * (stop - start), path)


def _written(folder: Path, item: WorkItem, unit: str, start: int, stop: int, **fields: Any):
    placed = {"unit": unit, "shard_index": start // 2, "start": start, "stop": stop}
    return _shard(folder, unit, start, stop, shard_metadata(item, HASHES, **placed, **fields))


def _indices(part: pa.Table) -> list[int]:
    return part.column("index").to_pylist()


def test_shards_are_read_unit_after_unit_each_in_image_order(tmp_path):
    item = _item()
    shards = {
        "b": [_written(tmp_path, item, "b", 2, 4), _written(tmp_path, item, "b", 0, 2)],
        "a": [_written(tmp_path, item, "a", 4, 5), _written(tmp_path, item, "a", 0, 4)],
    }
    found = read_shards(item, shards, json_table, label="toy", units=["a", "b"])
    assert [(s.unit, s.start) for s in found.shards] == [("a", 0), ("a", 4), ("b", 0), ("b", 2)]
    assert [i for part in found.parts for i in _indices(part)] == [0, 1, 2, 3, 4, 0, 1, 2, 3]
    assert [(s.unit, s.start) for s in in_order(shards)] == [("b", 0), ("b", 2), ("a", 0), ("a", 4)]
    only_b = found.unit("b")
    assert [s.start for s in only_b.shards] == [0, 2] and only_b.seconds == 2.0
    assert found.seconds == 4.5


def test_a_shard_naming_another_seed_commitment_is_refused(tmp_path):
    item = _item()
    other = commitment(seed_text(SEED + 1))
    placed = {"unit": "a", "shard_index": 1, "start": 2, "stop": 4}
    good = _written(tmp_path, item, "a", 0, 2)
    metadata = {**shard_metadata(item, HASHES, **placed), "seed_commitment": other}
    bad = _shard(tmp_path, "a", 2, 4, metadata)
    with pytest.raises(StorageError, match="another run seed") as raised:
        read_shards(item, {"a": [bad, good]}, json_table, label="toy")
    message = str(raised.value)
    assert f"toy shard {str(bad.path)!r}" in message
    assert other[:12] in message and item.seed_commitment[:12] in message


def test_a_secret_seed_run_refuses_a_shard_without_commitment_a_public_one_takes_it(tmp_path):
    bare = _shard(tmp_path, "a", 0, 2, {"data_hashes": HASHES})
    with pytest.raises(StorageError, match="another run seed"):
        read_shards(_item("secret"), {"a": [bare]}, json_table, label="toy")
    found = read_shards(_item("public"), {"a": [bare]}, json_table, label="toy")
    assert found.data_hashes() == HASHES


def test_shards_computed_on_other_bytes_are_refused_when_results_are_made(tmp_path):
    item = _item()
    other = {**HASHES, "sha256": "cd" * 32}
    placed = {"unit": "a", "shard_index": 1, "start": 2, "stop": 4}
    second = _shard(tmp_path, "a", 2, 4, shard_metadata(item, other, **placed))
    shards = {"a": [_written(tmp_path, item, "a", 0, 2), second]}
    found = read_shards(item, shards, json_table, label="toy", hashes_of="the toy unit 'a'")
    with pytest.raises(StorageError, match="the shards of the toy unit 'a' were computed on diff"):
        found.data_hashes()
    with pytest.raises(StorageError, match="computed on different data"):
        found.result("a", summary={}, records_path="x", count=4)


def test_a_shard_of_another_protocol_and_an_unreadable_one_are_refused_naming_the_file(tmp_path):
    item = _item()
    shard = _written(tmp_path, item, "a", 0, 2, fingerprint="f" * 64)
    with pytest.raises(StorageError) as raised:
        read_shards(
            item, {"a": [shard]}, json_table, label="toy", expect={"fingerprint": "e"},
            differs=lambda found: f"under fingerprint {found['fingerprint'][:4]}",
        )  # fmt: skip
    assert str(raised.value) == (
        f"toy shard {str(shard.path)!r} was computed under fingerprint ffff; re-run the "
        "submission fresh"
    )

    def broken(path: Path) -> tuple[dict[str, Any], None]:
        raise ValueError("not a records file")

    with pytest.raises(StorageError) as raised:
        read_shards(item, {"a": [shard]}, broken, label="toy", wrap=(ValueError,))
    assert str(raised.value) == f"toy shard {str(shard.path)!r}: not a records file"
    with pytest.raises(ValueError):  # not wrapped: the reader's own error
        read_shards(item, {"a": [shard]}, broken, label="toy")


def test_shard_files_name_the_commitment_merged_files_and_results_the_revealed_seed(tmp_path):
    item = _item()
    shard = _written(tmp_path, item, "a", 0, 2, protocol={"k": 2})
    metadata, table = json_table(shard.path)
    assert metadata == {
        "submission_id": 7, "benchmark": "tiny", "unit": "a", "shard_index": 0, "start": 0,
        "stop": 2, "protocol": {"k": 2}, "seed_commitment": item.seed_commitment,
        "data_hashes": HASHES,
    }  # fmt: skip
    assert table.schema.metadata is None and _indices(table) == [0, 1]
    assert item.seed_text not in shard.path.read_bytes().decode("latin-1")

    found = read_shards(item, {"a": [shard]}, json_table, label="toy")
    context = MergeContext("9.9", lambda unit: (f"{unit}.parquet", tmp_path / f"{unit}.parquet"))
    revealed = {
        "seed": item.seed_text,
        "seed_kind": "secret",
        "seed_commitment": item.seed_commitment,
    }
    merged = found.merged_metadata(context, unit="a")
    assert merged == {"submission_id": 7, "unit": "a", "evaluator_version": "9.9", **revealed}
    write_json_table(pa.concat_tables(found.parts), tmp_path / "a.parquet", merged)
    assert json_table(tmp_path / "a.parquet")[0] == merged

    result = found.result("a", summary={"n": 2}, records_path="a.parquet", count=2,
                          protocol={"k": 2}, seeds={"stream": "s"})  # fmt: skip
    assert result.seeds == {**revealed, "stream": "s"}
    assert (result.data_hashes, result.seconds, result.protocol) == (HASHES, 1.0, {"k": 2})


def test_the_registry_declares_every_stages_figures_to_the_leaderboard_entries():
    keys = {spec.key for stage in registry.all_stages() for spec in stage.all_metric_specs()}
    assert keys and keys <= known_figures()
    entry = LeaderboardEntry(submission_id=1, benchmark_id=1)
    assert entry.macr is None and entry.pd_acc_8 is None  # known, not measured
    with pytest.raises(AttributeError):
        entry.no_such_figure  # noqa: B018
    declare_figures(["contract_test_figure"])
    assert entry.contract_test_figure is None


def test_the_architecture_page_shows_the_toy_stage_as_it_is():
    page = (ROOT / "docs" / "architecture" / "stages.md").read_text(encoding="utf-8")
    source = (ROOT / "tests" / "support" / "toy_stage.py").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```$", page, re.M | re.S)
    assert source in blocks, "docs/architecture/stages.md must quote tests/support/toy_stage.py"
