"""Per-image certification records on disk: one parquet file per (test set, shard).

Records keep the raw counts (n_a, n_y, n) next to the derived radius, so every metric can be
recomputed later at another α without re-running the model. Files are written atomically
(temporary file + rename): a reader never sees a half-written file.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from certbench.errors import RecordsError
from certbench.smoothing.outcomes import CertifyRecord

SCHEMA = pa.schema(
    [
        ("index", pa.int64()),
        ("label", pa.int64()),
        ("prediction", pa.int64()),
        ("radius", pa.float64()),
        ("pa_lower", pa.float64()),
        ("selected", pa.int64()),
        ("n_a", pa.int64()),
        ("n_y", pa.int64()),
        ("n", pa.int64()),
        ("n0", pa.int64()),
        ("correct", pa.bool_()),
        ("seconds", pa.float64()),
        ("sigma", pa.float64()),
        ("alpha", pa.float64()),
        ("early_abstain", pa.bool_()),
    ]
)
METADATA_KEY = b"certbench"


def records_to_table(
    records: Sequence[CertifyRecord], metadata: Mapping[str, object] | None = None
) -> pa.Table:
    """Columnar form of the records; `metadata` (protocol, model, test set) rides in the schema."""
    columns = {field.name: [getattr(r, field.name) for r in records] for field in SCHEMA}
    schema = SCHEMA.with_metadata({METADATA_KEY: json.dumps(dict(metadata or {}), sort_keys=True)})
    return pa.Table.from_pydict(columns, schema=schema)


def table_to_records(table: pa.Table) -> list[CertifyRecord]:
    """Inverse of records_to_table; names the missing columns of a foreign file."""
    missing = [name for name in SCHEMA.names if name not in table.column_names]
    if missing:
        raise RecordsError(f"records are missing columns {missing}; expected {SCHEMA.names}")
    columns = table.select(SCHEMA.names).to_pydict()
    return [
        CertifyRecord(**{name: columns[name][i] for name in SCHEMA.names})
        for i in range(table.num_rows)
    ]


def write_records(
    records: Sequence[CertifyRecord],
    path: str | Path,
    metadata: Mapping[str, object] | None = None,
) -> Path:
    """Write records to parquet atomically (no partial file is ever visible at `path`)."""
    return write_table_atomic(records_to_table(records, metadata), path)


def write_table_atomic(table: pa.Table, path: str | Path) -> Path:
    """Write a parquet file via ``.<name>.*.tmp`` + rename; a crash leaves only the temporary
    file, which the workers sweep by that name pattern."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
    )
    os.close(handle)
    try:
        pq.write_table(table, temporary)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def read_table(path: str | Path) -> pa.Table:
    """Read a records parquet file, with a clear error for a missing or foreign file."""
    source = Path(path)
    if not source.is_file():
        raise RecordsError(f"records file {str(source)!r} does not exist")
    try:  # ParquetFile, not pq.read_table: that one imports pyarrow.dataset (and pandas), ~1 s
        with pq.ParquetFile(source) as parquet:
            return parquet.read()
    except (pa.ArrowInvalid, OSError) as err:
        raise RecordsError(
            f"{str(source)!r} is not a readable parquet records file: {err}"
        ) from err


def read_records(path: str | Path) -> list[CertifyRecord]:
    """Records of a parquet file written by write_records."""
    return table_to_records(read_table(path))


def read_metadata(path: str | Path) -> dict[str, object]:
    """The metadata stored with the records (empty if none)."""
    raw = (read_table(path).schema.metadata or {}).get(METADATA_KEY)
    return json.loads(raw) if raw else {}


def read_benchmark_records(folder: str | Path) -> dict[str, list[CertifyRecord]]:
    """Records of every ``*.parquet`` file under `folder`, grouped by test set.

    A file's test set is its metadata's ``test_set`` (written by ``certbench certify``), else
    its file name without the suffix; shards of one test set are joined.
    """
    root = Path(folder)
    files = sorted(root.rglob("*.parquet"))
    if not files:
        raise RecordsError(f"{str(root)!r} holds no records (*.parquet) files")
    grouped: dict[str, list[CertifyRecord]] = {}
    for path in files:
        table = read_table(path)
        raw = (table.schema.metadata or {}).get(METADATA_KEY)
        name = json.loads(raw).get("test_set") if raw else None
        grouped.setdefault(str(name or path.stem), []).extend(table_to_records(table))
    return grouped
