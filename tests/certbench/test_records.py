"""Records parquet files: lossless round trip, metadata, atomic writes, foreign files."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from certbench.errors import RecordsError
from certbench.smoothing.core import CertifyRecord
from certbench.smoothing.records import SCHEMA, read_metadata, read_records, write_records


def sample_records() -> list[CertifyRecord]:
    return [
        CertifyRecord(
            index=i,
            label=i % 3,
            prediction=-1 if i == 2 else i % 3,
            radius=0.1 * i,
            pa_lower=0.5 + 0.01 * i,
            selected=i % 3,
            n_a=900 + i,
            n_y=800 + i,
            n=1000,
            n0=100,
            correct=i != 2,
            seconds=0.25,
            sigma=0.5,
            alpha=0.001,
            early_abstain=i == 2,
        )
        for i in range(4)
    ]


def test_schema_covers_every_record_field():
    assert SCHEMA.names == [f.name for f in dataclasses.fields(CertifyRecord)]


def test_round_trip_is_lossless_and_keeps_metadata(tmp_path):
    path = write_records(sample_records(), tmp_path / "a" / "r.parquet", {"test_set": "fog_s3"})
    assert read_records(path) == sample_records()
    assert read_metadata(path) == {"test_set": "fog_s3"}
    assert [p.name for p in path.parent.iterdir()] == ["r.parquet"]  # no temporary left behind


def test_failed_write_leaves_no_file(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", broken)
    with pytest.raises(OSError, match="disk full"):
        write_records(sample_records(), tmp_path / "r.parquet")
    assert list(tmp_path.iterdir()) == []


def test_foreign_and_missing_files_give_clear_errors(tmp_path):
    with pytest.raises(RecordsError, match="does not exist"):
        read_records(tmp_path / "nope.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(RecordsError, match="not a readable parquet"):
        read_records(tmp_path / "junk.parquet")
    pq.write_table(pa.table({"index": [1], "radius": [0.2]}), tmp_path / "other.parquet")
    with pytest.raises(RecordsError, match="missing columns"):
        read_records(tmp_path / "other.parquet")
