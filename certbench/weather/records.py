"""Per-image records of the simulation attack, their parquet files, merging and summaries.

Two record kinds, one row per (weather, severity, image): :class:`WeatherRecord` for the base
classifier (random and worst-case correctness) and :class:`SmoothedWeatherRecord` for the
smoothed classifier (a CERTIFY record of the attacked image). Shards over disjoint image ranges
merge into exactly the records of one unsharded run; every summary is computed from records.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from certbench.errors import RecordsError
from certbench.smoothing import (
    METADATA_KEY,
    RADII,
    CertifyRecord,
    read_table,
    summarize,
    write_table_atomic,
)


@dataclass(frozen=True, slots=True)
class WeatherRecord:
    """The base classifier on one image under one weather set.

    ``robust``: no iterate of any restart (start points included) was misclassified: the image
    is *safe* in the sense of Wang et al., NeurIPS 2022 ML Safety Workshop. ``random_correct``:
    correct on restart 0's start, the random test set's weather for this image.
    ``broken_restart``/``broken_step``: where the first misclassification was found (−1 if robust;
    step 0 is a start point). ``attacked_*``: the reported attacked image (first misclassified
    iterate, else the highest-loss one).
    """

    index: int
    label: int
    weather: str
    severity: int
    clean_prediction: int
    random_prediction: int
    attacked_prediction: int
    clean_correct: bool
    random_correct: bool
    robust: bool
    broken_restart: int
    broken_step: int
    attacked_loss: float
    restarts_run: int


@dataclass(frozen=True, slots=True)
class SmoothedWeatherRecord:
    """CERTIFY on the attacked image (the highest SmoothAdv objective found) of one image."""

    index: int
    label: int
    weather: str
    severity: int
    objective: float
    prediction: int
    radius: float
    pa_lower: float
    selected: int
    n_a: int
    n_y: int
    n: int
    n0: int
    correct: bool
    seconds: float
    sigma: float
    alpha: float
    early_abstain: bool

    @classmethod
    def from_certify(
        cls, record: CertifyRecord, *, weather: str, severity: int, objective: float
    ) -> SmoothedWeatherRecord:
        values = {f.name: getattr(record, f.name) for f in fields(CertifyRecord)}
        return cls(weather=weather, severity=severity, objective=float(objective), **values)

    def certify_record(self) -> CertifyRecord:
        return CertifyRecord(**{f.name: getattr(self, f.name) for f in fields(CertifyRecord)})


AnyRecord = WeatherRecord | SmoothedWeatherRecord
R = TypeVar("R", WeatherRecord, SmoothedWeatherRecord)
KINDS: dict[str, type] = {"base": WeatherRecord, "smoothed": SmoothedWeatherRecord}
_ARROW = {int: pa.int64(), bool: pa.bool_(), float: pa.float64(), str: pa.string()}
_PY = {"int": int, "bool": bool, "float": float, "str": str}


def _schema(cls: type) -> pa.Schema:
    return pa.schema([(f.name, _ARROW[_PY[str(f.type)]]) for f in fields(cls)])


def _kind_of(records: Sequence[AnyRecord], kind: str | None) -> str:
    kinds = {("base" if isinstance(r, WeatherRecord) else "smoothed") for r in records}
    if kind is not None:
        kinds.add(kind)
    if len(kinds) != 1:
        raise RecordsError(
            f"weather records must be all base or all smoothed, got {sorted(kinds) or 'none'}; "
            "pass kind= for an empty shard."
        )
    return kinds.pop()


def records_table(
    records: Sequence[AnyRecord],
    metadata: Mapping[str, object] | None = None,
    *,
    kind: str | None = None,
) -> pa.Table:
    """Columnar form; ``metadata`` (protocol, model, data) and the record kind ride along."""
    chosen = _kind_of(records, kind)
    meta = {**dict(metadata or {}), "record_type": f"weather-{chosen}"}
    schema = _schema(KINDS[chosen]).with_metadata(
        {METADATA_KEY: json.dumps(meta, sort_keys=True, default=str)}
    )
    return pa.Table.from_pylist([asdict(r) for r in records], schema=schema)


def write_weather_records(
    records: Sequence[AnyRecord],
    path: str | Path,
    metadata: Mapping[str, object] | None = None,
    *,
    kind: str | None = None,
) -> Path:
    """Parquet, atomically (temp file + rename)."""
    return write_table_atomic(records_table(records, metadata, kind=kind), path)


def table_records(table: pa.Table) -> list[WeatherRecord] | list[SmoothedWeatherRecord]:
    """Inverse of :func:`records_table`; names the missing columns of a foreign table."""
    kind = str(_metadata(table).get("record_type", "")).removeprefix("weather-")
    if kind not in KINDS:
        raise RecordsError(
            f"not a weather-attack records table (record_type {kind!r}); write it with "
            "write_weather_records."
        )
    cls = KINDS[kind]
    names = [f.name for f in fields(cls)]
    missing = [name for name in names if name not in table.column_names]
    if missing:
        raise RecordsError(f"weather records lack columns {missing}; expected {names}.")
    return [cls(**row) for row in table.select(names).to_pylist()]


def read_weather_records(path: str | Path) -> list[WeatherRecord] | list[SmoothedWeatherRecord]:
    """Records of a parquet file written by :func:`write_weather_records`."""
    return table_records(read_table(path))


def _metadata(table: pa.Table) -> dict[str, Any]:
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    return json.loads(raw) if raw else {}


def read_weather_metadata(path: str | Path) -> dict[str, Any]:
    """The metadata stored with the records (protocol, Δ, provenance)."""
    return _metadata(read_table(path))


def merge_weather_records(shards: Sequence[Sequence[R]]) -> list[R]:
    """Join shards (disjoint image ranges) into one list ordered by (weather, severity, index).

    Raises:
        RecordsError: shards overlap or mix record kinds.
    """
    rows = [r for shard in shards for r in shard]
    if rows:
        _kind_of(rows, None)
    keys = [(r.weather, r.severity, r.index) for r in rows]
    if len(set(keys)) != len(keys):
        raise RecordsError("weather shards overlap: a (weather, severity, index) appears twice.")
    return sorted(rows, key=lambda r: (r.weather, r.severity, r.index))


# --------------------------------------------------------------------------- summaries


@dataclass(frozen=True)
class WeatherSummary:
    """One row per (weather, severity) for tables, and flat figures for a leaderboard row.

    Base figures: ``clean_accuracy``, ``random_accuracy_<w>[_<s>]``,
    ``worst_case_accuracy_<w>[_<s>]`` (per weather: mean over its severities) and
    ``worst_case_accuracy`` (mean over all sets). Smoothed figures: ``attacked_acr[_<w>[_<s>]]``
    and ``attacked_certified_accuracy_<r>[_<w>[_<s>]]`` at the radii of
    ``certbench.smoothing.metrics``.
    """

    kind: str
    rows: list[dict[str, Any]]
    figures: dict[str, float]


def summarize_weather(records: Sequence[AnyRecord]) -> WeatherSummary:
    """Summary of base or smoothed records (all of one kind, at least one).

    Raises:
        RecordsError: no records, or mixed kinds.
    """
    if not records:
        raise RecordsError("no weather records to summarize; attack at least one image.")
    kind = _kind_of(records, None)
    groups: dict[tuple[str, int], list[Any]] = {}
    for r in records:
        groups.setdefault((r.weather, r.severity), []).append(r)
    rows = [
        {"weather": w, "severity": s, **(_base_row if kind == "base" else _smoothed_row)(group)}
        for (w, s), group in sorted(groups.items())
    ]
    return WeatherSummary(kind, rows, _figures(kind, rows, records))


def _base_row(group: Sequence[WeatherRecord]) -> dict[str, Any]:
    return {
        "images": len(group),
        "clean_accuracy": float(np.mean([r.clean_correct for r in group])),
        "random_accuracy": float(np.mean([r.random_correct for r in group])),
        "worst_case_accuracy": float(np.mean([r.robust for r in group])),
    }


def _smoothed_row(group: Sequence[SmoothedWeatherRecord]) -> dict[str, Any]:
    s = summarize([r.certify_record() for r in group])
    row: dict[str, Any] = {"images": s.count, "acr": s.acr, "abstain_rate": s.abstain_rate}
    row.update({f"certified_accuracy_{r:g}": v for r, v in s.certified_accuracy.items()})
    return row


def _figures(kind: str, rows: list[dict[str, Any]], records: Sequence[AnyRecord]) -> dict:
    names = (
        ("random_accuracy", "worst_case_accuracy")
        if kind == "base"
        else ("acr", *(f"certified_accuracy_{r:g}" for r in RADII))
    )
    prefix = "" if kind == "base" else "attacked_"
    out: dict[str, float] = {"images": float(len({r.index for r in records}))}
    if kind == "base":
        clean = {r.index: r.clean_correct for r in records if isinstance(r, WeatherRecord)}
        out["clean_accuracy"] = float(np.mean(list(clean.values())))
    for name in names:
        public = prefix + name
        for row in rows:
            out[f"{public}_{row['weather']}_{row['severity']}"] = row[name]
        for weather in sorted({row["weather"] for row in rows}):
            mine = [row[name] for row in rows if row["weather"] == weather]
            out[f"{public}_{weather}"] = float(np.mean(mine))
        if name != "random_accuracy":
            out[public] = float(np.mean([row[name] for row in rows]))
    return out
