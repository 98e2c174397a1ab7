"""Uncertainty of the certification figures in the service: 95 % intervals over the sampled images,
computed from the per-image records (``certbench.stats.entry_intervals``) when a run is
aggregated, and by ``certbench results backfill-intervals`` for entries aggregated before.

Where they are stored, and why:

- each leaderboard figure's bounds are two more metric values, ``<key>_ci_low`` and
  ``<key>_ci_high``, beside the figure in ``metric_values``: they are figures of the entry like
  the others (written in the same transaction, dropped with them on a rerun), every REST reader
  of metrics gets them without a join or a migration, and a lower bound is sortable through the
  same (benchmark, key, value) index;
- each test set's intervals go into its stored summary (``summary["intervals"]``, the JSON of
  ``FigureIntervals``), read with the per-test-set results;
- the per-image means over test sets that paired tests need (``ImageTerms``) go to one small
  parquet file per entry, ``records/<submission>/_certification_terms.parquet``, so that ranking
  a leaderboard page reads one file per entry instead of every test set's records. Tie marks are
  not stored: they depend on the order and filters of the page being read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from certbench.stats import FigureIntervals

from models.stages.base import CI_HIGH, CI_LOW
from models.stages.certification.keys import BANDS, PA_QUANTILES, RADIUS_KEYS

__all__ = ["CI_HIGH", "CI_LOW"]  # re-exported: the suffixes of every stage's stored bounds
#: p̂_A quantile → its leaderboard figure.
QUANTILE_KEYS = {0.5: "pa_median", **{float(q): key for key, q in PA_QUANTILES.items()}}
TERMS_UNIT = "_certification_terms"
"""Merge target name of the entry's image terms (``records/<submission>/<name>.parquet``)."""


def interval_keys() -> list[str]:
    """Every figure that carries an interval (its bounds are ``<key>_ci_low/_ci_high``)."""
    return [
        "macr",
        *RADIUS_KEYS.values(),
        "clean_accuracy",
        "abstain_rate",
        *QUANTILE_KEYS.values(),
        *(f"band_{band}" for band in BANDS),
    ]


def bound_keys() -> set[str]:
    """Metric keys of the stored bounds."""
    return {key + suffix for key in interval_keys() for suffix in (CI_LOW, CI_HIGH)}


def interval_metrics(intervals: FigureIntervals) -> dict[str, float | None]:
    """The stored bounds of every figure (None for a band the benchmark does not have)."""
    by_key = {
        "macr": intervals.acr,
        "clean_accuracy": intervals.clean_accuracy,
        "abstain_rate": intervals.abstain_rate,
    }
    by_key.update(
        {RADIUS_KEYS[r]: i for r, i in intervals.certified_accuracy.items() if r in RADIUS_KEYS}
    )
    by_key.update(
        {QUANTILE_KEYS[q]: i for q, i in intervals.pa_quantiles.items() if q in QUANTILE_KEYS}
    )
    out: dict[str, float | None] = {}
    for key in interval_keys():
        band = key.removeprefix("band_") if key.startswith("band_") else None
        interval = intervals.groups.get(band) if band else by_key.get(key)
        out[key + CI_LOW] = None if interval is None else interval.low
        out[key + CI_HIGH] = None if interval is None else interval.high
    return out


def band_groups(band_of: Mapping[str, str | None]) -> dict[str, list[str]]:
    """Test-set names by spectral band."""
    groups: dict[str, list[str]] = {}
    for name, band in band_of.items():
        if band in BANDS:
            groups.setdefault(band, []).append(name)
    return groups


def set_intervals(table: pa.Table) -> dict[str, Any]:
    """One test set's intervals as stored in its summary (``FigureIntervals.to_dict``)."""
    from certbench.stats import figure_intervals

    return figure_intervals({"": table}).to_dict()


def entry_intervals(
    tables: Mapping[str, pa.Table], band_of: Mapping[str, str | None]
) -> tuple[dict[str, float | None], pa.Table | None]:
    """An entry's interval metrics and its image-terms table (None when the test sets do not
    share their images: paired tests then read the full records)."""
    from certbench.errors import RecordsError
    from certbench.stats import figure_intervals, image_terms

    groups = band_groups(band_of)
    metrics = interval_metrics(figure_intervals(tables, groups=groups))
    try:
        found = image_terms(tables, groups=groups)
    except RecordsError:
        return metrics, None
    return metrics, with_sets(found.to_table(), found.sets)


def terms_sets(table: pa.Table) -> int:
    """How many test sets an image-terms file averages (stored in its schema metadata)."""
    return int((table.schema.metadata or {}).get(b"sets", b"1"))


def with_sets(table: pa.Table, sets: int) -> pa.Table:
    return table.replace_schema_metadata({b"sets": str(sets).encode()})


def missing_bounds(keys: Sequence[str]) -> bool:
    """Whether an entry's stored metric keys lack the interval bounds (to backfill)."""
    return f"macr{CI_LOW}" not in keys
