"""Per-image terms of the figures of the stages beyond certification (``certbench.figure_terms``).

Each function turns one stage's merged records into ``FigureTerms`` named like the figures of
that stage's own summary, so that the mean of every figure's terms IS the summary's figure (the
tests check equality on real records):

- robustness (Muthukumar et al. 2025, seed 004): clean accuracy of the base classifier and its
  ℓ∞ and ℓ∞ ∩ PD robust accuracies per ε: 0/1 per image (``RobustnessReport.summary``);
- worst-case weather (Wang et al. 2022, seed 002): random and worst-case accuracy (0/1 per image
  and set), the smoothed classifier's ACR and certified accuracy under attacked weather, per
  set, per weather (mean over severities) and overall (mean over every set): every set attacks
  the same images, so a mean over sets is the per-image mean over sets
  (``certbench.weather_records.summarize_weather``);
- Fourier sensitivity (Sun et al. 2022, seed 000 §2.2): the mean of a heatmap band's cells is the
  mean over images of each image's mean over those cells, when every cell holds every image (the
  stage checks it), with each record written to its cell and its mirror's as
  ``certbench.fourier_heatmap.assemble_heatmap`` does;
- Fourier lens (Fridovich-Keil et al. 2022, seed 003): one term per path (HFF, consistent
  distance) or Jacobian image (‖J‖², the figure being its root-mean-square), on the work units of
  the benchmark's public plan, so two entries are paired unit by unit.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from certbench.errors import RecordsError
from certbench.figure_terms import FigureTerms, Kind, figure_terms, mean_over_sets
from certbench.metrics import RADII

if TYPE_CHECKING:
    from certbench.fourier_sensitivity import SensitivityRecord
    from certbench.lens_metrics import LensRecord

SENSITIVITY_BANDS = ("low", "mid", "high", "all")


# --------------------------------------------------------------------------- robustness


def robustness_terms(table: pa.Table) -> dict[str, FigureTerms]:
    """``clean_accuracy`` (on the smallest ε's records, as the report's summary) and
    ``linf_robust_accuracy_<tag>``/``pd_robust_accuracy_<tag>`` per ε (tag = ε·255)."""
    names = ("index", "eps", "clean_correct", "linf_robust", "pd_robust")
    missing = [n for n in names if n not in table.column_names]
    if missing:
        raise RecordsError(f"robustness records lack columns {missing}")
    c = {n: table.column(n).to_numpy(zero_copy_only=False) for n in names}
    eps_list = np.unique(c["eps"])
    if len(eps_list) == 0:
        raise RecordsError("no robustness records: attack at least one image")
    out: dict[str, FigureTerms] = {}
    for k, eps in enumerate(eps_list):
        chosen = c["eps"] == eps
        index = c["index"][chosen]
        if k == 0:
            out["clean_accuracy"] = figure_terms(index, c["clean_correct"][chosen], "proportion")
        tag = f"{round(float(eps) * 255):d}"
        for field, name in (("linf_robust", "linf"), ("pd_robust", "pd")):
            out[f"{name}_robust_accuracy_{tag}"] = figure_terms(
                index, c[field][chosen], "proportion"
            )
    return out


# --------------------------------------------------------------------------- weather


def _weather_values(record: Any, kind: str) -> dict[str, tuple[float, Kind]]:
    """One record's per-image term of each per-set figure of its kind."""
    if kind == "base":
        return {
            "random_accuracy": (float(record.random_correct), "proportion"),
            "worst_case_accuracy": (float(record.robust), "proportion"),
        }
    values: dict[str, tuple[float, Kind]] = {
        "attacked_acr": (record.radius if record.correct else 0.0, "mean")
    }
    for r in RADII:
        hit = record.correct and record.radius >= r
        values[f"attacked_certified_accuracy_{r:g}"] = (float(hit), "proportion")
    return values


def weather_terms(records: Sequence[Any]) -> dict[str, FigureTerms]:
    """Terms of every figure of ``summarize_weather`` on base or smoothed records (one kind):
    ``<figure>_<weather>_<severity>`` per set, ``<figure>_<weather>`` (mean over its
    severities) and ``<figure>`` (mean over every set; for the base classifier's random
    accuracy too, the leaderboard's random-weather figure). A mean whose sets do not share
    their images has no terms (left out)."""
    from certbench.weather_records import WeatherRecord

    if not records:
        raise RecordsError("no weather records: attack at least one image")
    kinds = {"base" if isinstance(r, WeatherRecord) else "smoothed" for r in records}
    if len(kinds) != 1:
        raise RecordsError("weather records must be all base or all smoothed")
    kind = kinds.pop()
    per_set: dict[str, dict[tuple[str, int], list[tuple[int, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    kind_of: dict[str, Kind] = {}
    for r in records:
        for name, (value, figure_kind) in _weather_values(r, kind).items():
            per_set[name][(r.weather, r.severity)].append((r.index, value))
            kind_of[name] = figure_kind
    out: dict[str, FigureTerms] = {}
    for name, sets in per_set.items():
        arrays = {key: _columns(rows) for key, rows in sets.items()}
        groups: dict[str, list[tuple[str, int]]] = {name: sorted(arrays)}
        for weather, severity in arrays:
            groups[f"{name}_{weather}_{severity}"] = [(weather, severity)]
            groups.setdefault(f"{name}_{weather}", []).append((weather, severity))
        for figure, members in groups.items():
            found = mean_over_sets({f"{w}-{s}": arrays[(w, s)] for w, s in members}, kind_of[name])
            if found is not None:
                out[figure] = found
    return out


def _columns(rows: list[tuple[int, float]]) -> tuple[np.ndarray, np.ndarray]:
    index, values = zip(*rows, strict=True)
    return np.asarray(index), np.asarray(values, dtype=np.float64)


# --------------------------------------------------------------------------- Fourier sensitivity


def sensitivity_terms(records: Sequence[SensitivityRecord], *, size: int) -> dict[str, FigureTerms]:
    """``acr:<band>`` (smoothed runs) and ``base_accuracy:<band>`` for the radial bands low,
    mid, high and all: each image's mean over the band's cells of its ACR term (radius if
    correct, else 0) or its base-classifier correctness. Raises RecordsError when an image lacks
    a cell another image has (the band mean then weighs images unequally)."""
    from certbench.fourier_basis import mirror
    from certbench.spectral import frequency_band

    if not records:
        raise RecordsError("no Fourier-sensitivity records: compute at least one grid point")
    smoothed = records[0].certified is not None
    sums: dict[tuple[str, str], dict[int, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    cells: dict[str, set[tuple[int, int]]] = defaultdict(set)
    band_of: dict[tuple[int, int], str] = {}
    for r in records:
        for cell in {r.point, mirror(r.point, size)}:
            if cell not in band_of:
                band_of[cell] = frequency_band(float(np.hypot(*cell)), size=size)
            for band in (band_of[cell], "all"):
                cells[band].add(cell)
                counts[band][r.index] += 1
                sums[("base_accuracy", band)][r.index] += float(r.base_correct)
                if smoothed and r.certified is not None:
                    c = r.certified
                    sums[("acr", band)][r.index] += c.radius if c.correct else 0.0
    out: dict[str, FigureTerms] = {}
    for (name, band), by_image in sums.items():
        per_image = counts[band]
        if set(per_image.values()) != {len(cells[band])}:
            raise RecordsError(
                f"band {band!r}: images hold {sorted(set(per_image.values()))} of its "
                f"{len(cells[band])} cells; merge every shard of every grid point first"
            )
        index = np.fromiter(by_image, dtype=np.int64)
        values = np.array([by_image[i] / per_image[i] for i in index])
        kind: Kind = "proportion" if name == "base_accuracy" else "mean"
        out[f"{name}:{band}"] = figure_terms(index, values, kind, sets=len(cells[band]))
    return out


# --------------------------------------------------------------------------- Fourier lens


def lens_terms(records: Sequence[LensRecord]) -> dict[str, FigureTerms]:
    """Every lens figure of ``certbench.lens_metrics.METRICS`` the records hold: one term per
    work unit (path or Jacobian image), ``rms`` for the Jacobian norm."""
    from certbench.lens_metrics import METRICS

    by_kind: dict[str, list[LensRecord]] = defaultdict(list)
    for r in records:
        by_kind[r.kind].append(r)
    out: dict[str, FigureTerms] = {}
    for name, (kind, attr) in METRICS.items():
        rows = by_kind.get(kind)
        if rows:
            figure_kind: Kind = "rms" if kind == "jacobian" else "mean"
            out[name] = figure_terms(
                [r.unit for r in rows], [float(getattr(r, attr)) for r in rows], figure_kind
            )
    return out
