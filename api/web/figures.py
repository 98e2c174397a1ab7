"""The leaderboard's figures, built from what the service layer returns.

Inputs are ``ResultsPublic`` (``api.services.leaderboards.results``) and the per-image records files
that ``api.services.leaderboards.records_file`` resolves — the same data the REST API serves, so a
figure can always be reproduced from the downloadable records. Curves come from
``certbench.smoothing.metrics`` (certified accuracy on a fine radius grid, the p_A curve of Sun
et al., ICML 2025), never from numbers re-derived here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pyarrow as pa
from sqlalchemy.orm import Session

from api.schemas.result import ResultsPublic, TestSetResultPublic
from api.services import leaderboards as service
from certbench.errors import RecordsError
from certbench.figures import Axis, Curve, Figure, grid_heatmap, line_chart
from certbench.smoothing import PA_GRID, RADII, pa_ecdf, read_table
from models.core.errors import NotFoundError
from models.core.settings import Settings
from models.db.entities import User

#: Certified accuracy is evaluated on this grid (ℓ2 radius over [0,1] pixels); σ=1 with
#: n=100,000 and α=0.001 certifies at most ≈3.8, so 4.0 covers every allowed σ.
RADIUS_GRID = np.round(np.arange(0, 801) * 0.005, 3)
#: Above this many test sets, per-set curves are grouped (band, α, ...) to stay readable.
MAX_SET_CURVES = 6
BAND_ORDER = ("low", "mid", "high")
RADIUS_AXIS_LABEL = "radius (ℓ2, [0,1] pixels)"


@dataclass(frozen=True)
class SetCurves:
    """Curves of one test set. ``pa`` is None when only the stored summary grid is available."""

    test_set: str
    radii: np.ndarray
    certified: np.ndarray
    pa: np.ndarray | None
    from_records: bool
    images: int = 0
    """Images of the test set (0: unknown): the width of the p_A curve's band depends on it."""


def certified_on_grid(table: pa.Table, grid: np.ndarray = RADIUS_GRID) -> np.ndarray:
    """``certbench.smoothing.metrics.certified_accuracy`` at every grid radius, in one sorted pass.

    The library evaluates one radius at a time (fine for its five radii); 801 radii × 192 test
    sets would take seconds per page, so the same definition (correct ∧ radius ≥ r) is counted
    with a binary search here; tests/web check both agree on real records.
    """
    correct = table.column("correct").to_numpy(zero_copy_only=False).astype(bool)
    radius = table.column("radius").to_numpy(zero_copy_only=False)
    if len(radius) == 0:
        raise RecordsError("no records: metrics need at least one certified image")
    certified = np.sort(radius[correct])
    below = np.searchsorted(certified, grid, side="left")
    return (len(certified) - below) / len(radius)


@lru_cache(maxsize=4096)
def _curves_from_file(path: str, mtime_ns: int, test_set: str) -> SetCurves:
    """Cached by path and modification time: records files are written once, atomically."""
    table = read_table(path)
    return SetCurves(
        test_set=test_set,
        radii=RADIUS_GRID,
        certified=certified_on_grid(table),
        pa=pa_ecdf(table),
        from_records=True,
        images=table.num_rows,
    )


def _curves_from_summary(result: TestSetResultPublic) -> SetCurves:
    radii = np.array(RADII)
    values = np.array([result.certified_accuracy[f"{r:g}"] for r in RADII])
    return SetCurves(result.test_set, radii, values, None, from_records=False, images=result.count)


def set_curves(
    session: Session,
    results: ResultsPublic,
    *,
    viewer: User | None,
    settings: Settings,
) -> list[SetCurves]:
    """Curves per test set, from the records file when it is on disk.

    A missing records file (artifacts pruned, or a result imported without records) is an
    expected case: the curve falls back to the five stored radii and has no p_A curve.
    """
    out = []
    for result in results.results:
        try:
            path = service.records_file(
                session, results.submission_id, result.test_set, viewer=viewer, settings=settings
            )
        except NotFoundError:
            out.append(_curves_from_summary(result))
            continue
        out.append(_curves_from_file(str(path), Path(path).stat().st_mtime_ns, result.test_set))
    return out


def _mean_on_common_grid(curves: Sequence[SetCurves]) -> tuple[np.ndarray, np.ndarray]:
    """Mean certified accuracy over test sets; step-interpolates coarse (summary) curves."""
    if all(c.from_records for c in curves):
        return RADIUS_GRID, np.mean([c.certified for c in curves], axis=0)
    grid = np.array(RADII)
    values = [np.interp(grid, c.radii, c.certified) for c in curves]
    return grid, np.mean(values, axis=0)


def mean_pa(curves: Sequence[SetCurves]) -> np.ndarray | None:
    """The p_A curve (Sun et al., ICML 2025) averaged over test sets (None if any set lacks its
    records)."""
    measured = [c.pa for c in curves if c.pa is not None]
    if not curves or len(measured) < len(curves):
        return None
    return np.mean(measured, axis=0)


def _radius_range(curves: Sequence[SetCurves]) -> float:
    """Upper end of the x axis: just past the largest radius any curve certifies."""
    top = 0.0
    for c in curves:
        nonzero = c.radii[c.certified > 0]
        if nonzero.size:
            top = max(top, float(nonzero.max()))
    return max(0.5, float(np.ceil((top + 0.05) / 0.25) * 0.25))


def _groups(results: ResultsPublic) -> dict[str, list[str]]:
    """How many-set benchmarks are summarised: by band, else by α, else none."""
    by_band: dict[str, list[str]] = defaultdict(list)
    by_alpha: dict[str, list[str]] = defaultdict(list)
    for r in results.results:
        if r.band:
            by_band[f"{r.band} band"].append(r.test_set)
        if "alpha" in r.attributes:
            by_alpha[f"α = {r.attributes['alpha']:g}"].append(r.test_set)
    if len(by_band) > 1:
        return {k: by_band[k] for k in sorted(by_band, key=_band_key)}
    if len(by_alpha) > 1:
        return dict(sorted(by_alpha.items()))
    return {}


def _band_key(label: str) -> int:
    band = label.split()[0]
    return BAND_ORDER.index(band) if band in BAND_ORDER else len(BAND_ORDER)


def certified_accuracy_chart(
    results: ResultsPublic, curves: Sequence[SetCurves], *, chart_id: str = "cert-acc"
) -> Figure:
    """Certified accuracy vs radius: each test set (or group) and the mean over test sets."""
    by_name = {c.test_set: c for c in curves}
    series: list[Curve] = []
    if len(curves) <= MAX_SET_CURVES:
        series = [Curve(c.test_set, c.radii, c.certified) for c in curves]
    else:
        for label, names in _groups(results).items():
            grid, mean = _mean_on_common_grid([by_name[n] for n in names])
            series.append(Curve(f"{label} ({len(names)} sets)", grid, mean))
    if len(curves) > 1:
        grid, mean = _mean_on_common_grid(curves)
        series.append(Curve(f"mean over {len(curves)} test sets", grid, mean, emphasis=True))
    description = (
        f"{results.model_name}: fraction of test images classified correctly with a "
        "certified ℓ2 radius at least r."
    )
    spec = line_chart(
        series,
        title="Certified accuracy vs radius",
        description=description,
        x=Axis(RADIUS_AXIS_LABEL, 0.0, _radius_range(curves)),
        y=Axis("certified accuracy", 0.0, 1.0, percent=True),
    )
    return Figure(chart_id, spec, description)


@dataclass(frozen=True)
class EntryCurves:
    """One entry's mean curves, for overlays on the model and compare pages."""

    label: str
    submission_id: int
    curves: list[SetCurves]


def overlay_certified_chart(entries: Sequence[EntryCurves], *, chart_id: str) -> Figure | None:
    """Mean certified accuracy vs radius of several entries (compare page).

    Entries without per-test-set results (no curve to average) are left out and named in the
    description; None when no entry has any (the page then shows no such chart)."""
    drawn = [entry for entry in entries if entry.curves]
    if not drawn:
        return None
    series = []
    for entry in drawn:
        grid, mean = _mean_on_common_grid(entry.curves)
        series.append(Curve(entry.label, grid, mean))
    top = max(_radius_range(e.curves) for e in drawn)
    title = "Certified accuracy vs radius (mean over test sets)"
    missing = [entry.label for entry in entries if not entry.curves]
    note = f" No per-test-set results for: {', '.join(missing)}." if missing else ""
    spec = line_chart(
        series,
        title=title,
        description=title + note,
        x=Axis(RADIUS_AXIS_LABEL, 0.0, top),
        y=Axis("certified accuracy", 0.0, 1.0, percent=True),
    )
    return Figure(chart_id, spec, title + note)


def pa_band(
    curves: Sequence[SetCurves], curve: np.ndarray
) -> tuple[np.ndarray, np.ndarray, str] | None:
    """(low, high, what) of the simultaneous 95 % band around an entry's mean p_A curve
    (``certbench.stats.entry_intervals.mean_pa_band``: Kolmogorov for one test set, Bonferroni over
    several); None when a test set's image count is unknown."""
    from certbench.stats import mean_pa_band

    counts = [c.images for c in curves]
    if not counts or min(counts) < 1:
        return None
    half, method = mean_pa_band(counts)
    what = f"simultaneous 95 % band ±{half:.3f} ({method})"
    return np.clip(curve - half, 0.0, 1.0), np.clip(curve + half, 0.0, 1.0), what


def pa_chart(entries: Sequence[EntryCurves], *, chart_id: str, emphasis: int | None) -> Figure:
    """The complementary ECDF of p̂_A (Sun et al., ICML 2025): fraction of images correct with
    p̂_A ≥ x, with its simultaneous 95 % band shaded: the emphasised entry's only (model page), or
    every entry's when none is emphasised (compare page).

    Entries without records (no p_A curve) are left out and named in the description.
    """
    series, missing = [], []
    for entry in entries:
        curve = mean_pa(entry.curves)
        if curve is None:
            missing.append(entry.label)
            continue
        shaded = emphasis is None or entry.submission_id == emphasis
        band = pa_band(entry.curves, curve) if shaded else None
        series.append(
            Curve(entry.label, PA_GRID, curve, emphasis=entry.submission_id == emphasis, band=band)
        )
    if not series:
        raise NotFoundError("no per-image records are available for the p_A distribution")
    note = f" Records missing for: {', '.join(missing)}." if missing else ""
    description = (
        "For each x, the fraction of test images classified correctly with p̂_A = n_y/n ≥ x "
        "(mean over test sets). Higher curves hold up on hard images, which ACR hides. "
        "Shaded: a simultaneous 95 % band over the sampled images, covering the whole true "
        "curve at once (Kolmogorov; with several test sets, each set's band at 1 − 0.05/S, "
        "averaged)." + note
    )
    spec = line_chart(
        series,
        title="p_A distribution (complementary ECDF)",
        description=description,
        x=Axis("p̂_A (accuracy of the base model under noise)", 0.5, 1.0),
        y=Axis("fraction of images with p̂_A ≥ x", 0.0, 1.0, percent=True),
    )
    return Figure(chart_id, spec, description)


# ---- CIFAR-F: ACR over (α, f_c) -------------------------------------------------------------


def is_fourier(results: Sequence[TestSetResultPublic]) -> bool:
    """True for CIFAR-F style benchmarks: every test set carries ``f_c`` and ``alpha``."""
    return bool(results) and all("f_c" in r.attributes and "alpha" in r.attributes for r in results)


def fourier_grid(
    results: Sequence[TestSetResultPublic],
) -> tuple[list[float], list[int], np.ndarray]:
    """α values, f_c values and mean ACR over severities per (α, f_c) (NaN where missing)."""
    acc: dict[tuple[float, int], list[float]] = defaultdict(list)
    for r in results:
        acc[(float(r.attributes["alpha"]), int(r.attributes["f_c"]))].append(r.acr)
    alphas = sorted({a for a, _ in acc})
    fcs = sorted({f for _, f in acc})
    grid = np.full((len(alphas), len(fcs)), np.nan)
    for (alpha, f_c), values in acc.items():
        grid[alphas.index(alpha), fcs.index(f_c)] = float(np.mean(values))
    return alphas, fcs, grid


def fourier_heatmap(results: ResultsPublic, *, chart_id: str = "fourier-heatmap") -> Figure:
    alphas, fcs, grid = fourier_grid(results.results)
    title = "ACR over α × f_c (mean over severities)"
    return Figure(
        chart_id,
        grid_heatmap(
            grid,
            title=title,
            description=f"{results.model_name}: mean ACR over the severities of each CIFAR-F set.",
            row_labels=[f"{a:g}" for a in alphas],
            col_labels=[str(f) for f in fcs],
            x_label="centre frequency f_c",
            y_label="α",
            value_label="ACR",
        ),
        title,
    )


def fourier_lines(results: ResultsPublic, *, chart_id: str = "fourier-lines") -> Figure:
    """Sun et al., ECCV 2022, Fig. 6 for one model: one line per α of ACR over f_c."""
    alphas, fcs, grid = fourier_grid(results.results)
    series = [Curve(f"α = {a:g}", fcs, grid[i], markers=True) for i, a in enumerate(alphas)]
    title = "ACR over centre frequency, per α"
    spec = line_chart(
        series,
        title=title,
        x=Axis("centre frequency f_c", min(fcs), max(fcs), ticks=fcs),
        y=Axis("ACR (ℓ2 radius)", 0.0, _acr_top(grid)),
    )
    return Figure(chart_id, spec, title)


def fourier_panels(entries: Mapping[str, ResultsPublic], *, chart_id: str) -> list[Figure]:
    """Sun et al., ECCV 2022, Fig. 6 across entries: one chart per α, one line per entry."""
    grids = {label: fourier_grid(r.results) for label, r in entries.items()}
    alphas = sorted({a for alphas, _, _ in grids.values() for a in alphas})
    top = max(_acr_top(g) for _, _, g in grids.values())
    panels = []
    for alpha in alphas:
        series = []
        for label, (entry_alphas, fcs, grid) in grids.items():
            if alpha in entry_alphas:
                series.append(Curve(label, fcs, grid[entry_alphas.index(alpha)], markers=True))
        all_fcs = [f for _, fcs, _ in grids.values() for f in fcs]
        title = f"ACR over f_c at α = {alpha:g}"
        spec = line_chart(
            series,
            title=title,
            x=Axis("centre frequency f_c", min(all_fcs), max(all_fcs), ticks=sorted(set(all_fcs))),
            y=Axis("ACR (ℓ2 radius)", 0.0, top),
        )
        panels.append(Figure(f"{chart_id}-{alpha:g}".replace(".", "p"), spec, title))
    return panels


def _acr_top(grid: np.ndarray) -> float:
    finite = grid[np.isfinite(grid)]
    top = float(finite.max()) if finite.size else 0.0
    return max(0.25, float(np.ceil((top * 1.1) / 0.05) * 0.05))


# ---- corruption results by band -------------------------------------------------------------


@dataclass(frozen=True)
class CorruptionRow:
    band: str
    corruption: str
    acr: float
    severities: int


def corruption_rows(results: Sequence[TestSetResultPublic]) -> list[CorruptionRow]:
    """ACR per corruption (mean over severities), ordered low → mid → high band, then by name."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in results:
        if not r.band:
            continue
        name = str(r.attributes.get("corruption", r.test_set))
        groups[(r.band, name)].append(r.acr)
    rows = [
        CorruptionRow(band, name, float(np.mean(values)), len(values))
        for (band, name), values in groups.items()
    ]
    return sorted(rows, key=lambda row: (_band_key(row.band), row.corruption))


def _pct(value: float | None) -> str:
    return "not measured" if value is None else f"{value * 100:.1f}%"
