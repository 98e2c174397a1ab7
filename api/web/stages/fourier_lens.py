"""Web section of the Fourier-lens stage on the model page: per classifier variant (base, and
smoothed where the benchmark asks for it) a table of the lens figures with their 95 % intervals
(Fridovich-Keil et al. 2022: "Gaussian bounds for averages") and the protocol that produced them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from api.schemas.result import ResultsPublic, StageResultPublic
from models.stages.fourier_lens.stage import BASE, METRICS, PAPER, figure_specs

JACOBIAN_UNIT = "per unit pixel, [0,1] scale"
"""``certbench.lens.JACOBIAN_UNIT`` (not imported: the web page does not load torch)."""

STAGE = "fourier_lens"
TEMPLATE = "stages/fourier_lens.html"
UNIT_TITLES = {
    BASE: "Base classifier (softmax probabilities)",
    "smoothed": "Smoothed classifier (vote fractions under Gaussian noise)",
}


@dataclass(frozen=True)
class LensRow:
    """One figure: its metric key, column label, mean, 95 % interval, paths or images averaged,
    for HFF the paper equation's value (Nyquist bin kept; the headline ``mean`` leaves it out,
    as the released code behind the published values does), and its direction."""

    key: str
    label: str
    help: str
    mean: float | None
    low: float | None
    high: float | None
    count: int | None
    nyquist: float | None
    higher_is_better: bool


@dataclass(frozen=True)
class LensUnit:
    """The figures of one classifier variant."""

    unit: str
    title: str
    rows: list[LensRow]
    changed: dict[str, float]
    count: int
    seconds: float


def context(results: ResultsPublic) -> dict[str, Any]:
    """What the partial reads besides ``results``, ``benchmark`` and ``active``."""
    stored = [s for s in results.stages if s.stage == STAGE]
    if not stored:
        return {}
    stored.sort(key=lambda s: (s.unit != BASE, s.unit))
    return {
        "lens_units": [lens_unit(s) for s in stored],
        "lens_protocol": stored[0].protocol,
        "lens_work": work_description(stored[0].protocol),
        "lens_paper": PAPER,
        "lens_jacobian_unit": JACOBIAN_UNIT,
        "lens_pixel_space": stored[0].protocol.get("lens_version", 1) >= 2,
    }


def work_description(protocol: dict[str, Any]) -> list[str]:
    """What the protocol measured, one phrase per kind of work it ran."""
    kinds, q = protocol.get("run_kinds", []), protocol.get("parameters", {})
    out = []
    fourier = [k for k in ("amplitude", "phase") if k in kinds]
    if fourier:
        share = round(100 * float(q.get("low_frequency_fraction", 0)))
        out.append(
            f"{q.get('paths', 0):,} Fourier pairs × {q.get('steps')} images, lowest {share} % of "
            f"frequencies ({', '.join(fourier)})"
        )
    pixel = [k.removeprefix("pixel_") for k in ("pixel_within", "pixel_between") if k in kinds]
    if pixel:
        out.append(f"{q.get('pixel_pairs')} pixel pairs per class (pair), {' and '.join(pixel)}")
    if "jacobian" in kinds:
        projections = q.get("jacobian_projections") or 0
        how = f"{projections} random projections" if projections else "exact"
        out.append(f"{q.get('jacobian_images')} Jacobian images ({how})")
    return out


def headline_figures(summary: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(headline figures, the equation's HFF by headline key) of a stored summary.

    Summaries since ``hff_convention`` hold the released code's HFF in ``metrics`` and the
    equation's in ``nyquist``; older ones held the equation's in ``metrics`` and the code's in
    ``released``, so they are read the other way round and show the same convention."""
    figures = dict(summary.get("metrics", {}))
    if "hff_convention" in summary:
        nyquist = summary.get("nyquist", {})
        return figures, {k.removesuffix("_nyquist"): v for k, v in nyquist.items()}
    released = summary.get("released", {})
    equation = {k: figures[k] for k in released if k in figures}
    figures.update(released)
    return figures, equation


def lens_unit(result: StageResultPublic) -> LensUnit:
    label = result.summary.get("label", "paper")
    specs = figure_specs(label)
    figures, nyquist = headline_figures(result.summary)
    rows = []
    for key in METRICS:
        if key not in figures:
            continue
        figure, spec = figures[key], specs[key]
        rows.append(
            LensRow(
                key=key,
                label=spec.label,
                help=spec.help,
                mean=figure.get("mean"),
                low=figure.get("low"),
                high=figure.get("high"),
                count=figure.get("count"),
                nyquist=(nyquist.get(key) or {}).get("mean"),
                higher_is_better=spec.higher_is_better,
            )
        )
    return LensUnit(
        unit=result.unit,
        title=UNIT_TITLES.get(result.unit, result.unit),
        rows=rows,
        changed=dict(result.summary.get("changed", {})),
        count=result.count,
        seconds=result.seconds,
    )
