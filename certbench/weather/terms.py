"""Per-image terms of the worst-case weather stage's figures (``certbench.stats.terms``).

Random and worst-case accuracy (0/1 per image and set), the smoothed classifier's ACR and
certified accuracy under attacked weather (Wang et al., NeurIPS 2022 ML Safety Workshop), per set,
per weather (mean over severities) and overall (mean over every set): every set attacks the same
images, so a mean over sets is the per-image mean over sets
(``certbench.weather.records.summarize_weather``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from certbench.errors import RecordsError
from certbench.smoothing import RADII
from certbench.stats import FigureTerms, Kind, mean_over_sets
from certbench.weather.records import WeatherRecord


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
