"""Fourier-sensitivity records on disk: one parquet row per (grid point, image).

The columns are the record's own (``u``, ``v``, ``index``, ``label``, ``signs``, ``epsilon``,
``base_prediction``, ``base_correct``) followed by the certification columns of
``certbench.smoothing.records.SCHEMA`` (null for a base-only run), so the counts ``n_a``, ``n_y``,
``n`` of every certified image survive and metrics can be recomputed at another α. Files are written
atomically (``certbench.smoothing.records.write_table_atomic``); shards are merged by concatenation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa

from certbench.errors import RecordsError
from certbench.fourier.sensitivity import SensitivityRecord
from certbench.smoothing import METADATA_KEY, CertifyRecord, read_table, write_table_atomic
from certbench.smoothing import SCHEMA as CERTIFY_SCHEMA

_OWN = [
    ("u", pa.int64()),
    ("v", pa.int64()),
    ("index", pa.int64()),
    ("label", pa.int64()),
    ("signs", pa.list_(pa.int8())),
    ("epsilon", pa.float64()),
    ("base_prediction", pa.int64()),
    ("base_correct", pa.bool_()),
]
_CERTIFIED = [f for f in CERTIFY_SCHEMA if f.name not in ("index", "label")]
SCHEMA = pa.schema(_OWN + _CERTIFIED)
"""Record columns; the certification columns keep ``certbench.smoothing.records``'s names and
types."""


def sensitivity_table(
    records: Sequence[SensitivityRecord], metadata: Mapping[str, object] | None = None
) -> pa.Table:
    """Columnar form of the records; ``metadata`` (protocol, model, test set) rides in the
    schema."""
    columns: dict[str, list[object]] = {name: [] for name in SCHEMA.names}
    for r in records:
        for name, _ in _OWN:
            columns[name].append(list(r.signs) if name == "signs" else getattr(r, name))
        for field in _CERTIFIED:
            columns[field.name].append(
                None if r.certified is None else getattr(r.certified, field.name)
            )
    schema = SCHEMA.with_metadata({METADATA_KEY: json.dumps(dict(metadata or {}), sort_keys=True)})
    return pa.Table.from_pydict(columns, schema=schema)


def table_to_sensitivity(table: pa.Table) -> list[SensitivityRecord]:
    """Inverse of :func:`sensitivity_table`; names the missing columns of a foreign file."""
    missing = [name for name in SCHEMA.names if name not in table.column_names]
    if missing:
        raise RecordsError(
            f"Fourier-sensitivity records are missing columns {missing}; expected {SCHEMA.names}"
        )
    cols = table.select(SCHEMA.names).to_pydict()
    out = []
    for k in range(table.num_rows):
        certified = None
        if cols["radius"][k] is not None:
            certified = CertifyRecord(
                index=cols["index"][k],
                label=cols["label"][k],
                **{f.name: cols[f.name][k] for f in _CERTIFIED},
            )
        out.append(
            SensitivityRecord(
                u=cols["u"][k],
                v=cols["v"][k],
                index=cols["index"][k],
                label=cols["label"][k],
                signs=tuple(cols["signs"][k]),
                epsilon=cols["epsilon"][k],
                base_prediction=cols["base_prediction"][k],
                base_correct=cols["base_correct"][k],
                certified=certified,
            )
        )
    return out


def write_sensitivity_records(
    records: Sequence[SensitivityRecord],
    path: str | Path,
    metadata: Mapping[str, object] | None = None,
) -> Path:
    """Write records to parquet atomically."""
    return write_table_atomic(sensitivity_table(records, metadata), path)


def read_sensitivity_records(path: str | Path) -> list[SensitivityRecord]:
    """Records of a parquet file written by :func:`write_sensitivity_records`."""
    return table_to_sensitivity(read_table(path))
