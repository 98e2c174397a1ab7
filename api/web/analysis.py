"""The effective-robustness page, ``/analysis/{benchmark}``: per σ, the probit trend of every OOD
set, the selected set's scatter plot with its entries' ER, and the "which metric explains
robustness" table with one scatter plot per metric (Fridovich-Keil et al. 2022, Tables 1–3 and
Figures 2–4). Reads ``api.services.analysis`` like the REST endpoints, so both always agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from api.deps import SessionDep
from api.services import analysis as service
from api.services.analysis import Analysis, SigmaGroup, TrendResult
from api.web import figure_files
from api.web.auth import WebViewer
from api.web.rendering import HTMLRoute, render
from certbench.figures import (
    Figure,
    FitLine,
    ScatterPoint,
    linear_axis,
    probit,
    probit_axis,
    scatter_chart,
)
from certbench.lens import ID_ACCURACY, ArchitectureFit, PredictorFit
from models.catalog.benchmarks import list_benchmarks
from models.core.errors import IntakeError, NotFoundError
from models.stages.fourier_lens.stage import PAPER

router = APIRouter(route_class=HTMLRoute, include_in_schema=False)

#: Column headers of the predictor table (the paper's row names).
METRIC_LABELS = {
    ID_ACCURACY: "ID accuracy",
    "jacobian_norm": "Jacobian",
    "hff_pixel_within": "Pixel – within",
    "hff_pixel_between": "Pixel – between",
    "hff_amplitude": "Amp – HFF",
    "cd_amplitude": "Amp – CD",
    "hff_phase": "Phase – HFF",
    "cd_phase": "Phase – CD",
}
GOOD_R2 = 0.5
"""The paper bolds R² above 0.5 and marks the best metric of a row."""


def metric_label(key: str) -> str:
    base = key.removesuffix("_smoothed")
    label = METRIC_LABELS.get(base, base)
    return f"{label} (smoothed)" if base != key else label


@router.get("/analysis/{benchmark}", response_class=HTMLResponse, name="web_analysis")
def analysis_page(
    request: Request,
    session: SessionDep,
    viewer: WebViewer,
    benchmark: str,
    sigma: Annotated[str, Query(max_length=16)] = "",
    ood: Annotated[str, Query(max_length=200)] = "",
    id: Annotated[str, Query(pattern="^(smoothed|base)$")] = "smoothed",
) -> HTMLResponse:
    """Trends, ER and metric predictors of the benchmark's family at one σ and OOD set."""
    context = _context(session, viewer, benchmark, sigma, ood, id)
    context["figure_base"] = f"/analysis/{benchmark}/figures"
    context["figure_query"] = "?" + urlencode(
        {
            "sigma": context["group"].sigma if context["group"] else "",
            "id": id,
            "ood": context["trend"].ood.key if context["trend"] else "",
        }
    )
    return render(request, "analysis.html", context)


@router.get("/analysis/{benchmark}/figures/{name}.{fmt}", name="web_analysis_figure")
def analysis_figure(
    session: SessionDep,
    viewer: WebViewer,
    benchmark: str,
    name: figure_files.FigureName,
    fmt: figure_files.FigureFormat,
    sigma: Annotated[str, Query(max_length=16)] = "",
    ood: Annotated[str, Query(max_length=200)] = "",
    id: Annotated[str, Query(pattern="^(smoothed|base)$")] = "smoothed",
) -> Response:
    """One figure of the analysis page as SVG, PNG or PDF."""
    context = _context(session, viewer, benchmark, sigma, ood, id)
    return figure_files.figure_response(figure_files.collect(context["charts"]), name, fmt)


def _context(
    session: SessionDep, viewer: WebViewer, benchmark: str, sigma: str, ood: str, id: str
) -> dict[str, Any]:
    try:
        result = service.analyse(session, benchmark, viewer=viewer, id_source=id)  # type: ignore[arg-type]
    except NotFoundError as err:
        raise NotFoundError(_no_analysis(session, benchmark, err)) from err
    group = _pick_group(result, sigma)
    trend = _pick_trend(group, ood) if group else None
    context: dict[str, Any] = {
        "viewer": viewer,
        "name": benchmark,
        "analysis": result,
        "group": group,
        "trend": trend,
        "id_source": id,
        "paper": PAPER,
        "metric_label": metric_label,
        "charts": {},
        "predictor_rows": [],
        "pooled_rows": [],
    }
    if group is not None and trend is not None:
        context["charts"]["trend"] = trend_chart(trend, id)
        context["charts"]["metrics"] = metric_charts(group, trend)
        context["predictor_rows"] = predictor_rows(group)
        context["pooled_rows"] = predictor_rows(group, "pooled")
    return context


def _no_analysis(session: SessionDep, benchmark: str, err: NotFoundError) -> str:
    """Why a benchmark has no effective-robustness page, worded for researchers (the service's
    message speaks to API callers)."""
    names = [b.name for b in list_benchmarks(session)]
    if benchmark not in names:
        return str(err)  # names the closest benchmarks
    return (
        f"No effective-robustness analysis for {benchmark}: the analysis plots accuracy on "
        "corrupted (out-of-distribution) test sets against clean accuracy, so it needs a clean "
        "benchmark and at least one corrupted benchmark of the same base dataset on this server, "
        f"with entries of the same models on both. {benchmark} has no such partner here. "
        "Its leaderboard is at /leaderboards/" + benchmark + "."
    )


def _pick_group(result: Analysis, sigma: str) -> SigmaGroup | None:
    """The σ asked for, else the σ with the most matched entries (the smallest on ties)."""
    if not result.groups:
        return None
    if sigma:
        try:
            wanted = float(sigma)
        except ValueError as err:
            raise IntakeError(f"sigma={sigma!r} is not a number", code="invalid_request") from err
        for group in result.groups:
            if math.isclose(group.sigma, wanted, abs_tol=1e-9):
                return group
        raise IntakeError(
            f"no entries at σ = {sigma}; this analysis has σ {[g.sigma for g in result.groups]}",
            code="invalid_request",
        )
    return max(result.groups, key=lambda g: (len(g.entries), -g.sigma))


def _pick_trend(group: SigmaGroup, key: str) -> TrendResult | None:
    for trend in group.trends:
        if trend.ood.key == key:
            return trend
    if key:
        raise IntakeError(f"ood={key!r} is not an OOD set of this analysis", code="invalid_request")
    return group.trends[0] if group.trends else None


def trend_chart(trend: TrendResult, id_source: str) -> Figure:
    """OOD vs ID accuracy on probit axes, 95 % Clopper–Pearson bars, the fit (opacity R²)."""
    points = []
    for p in trend.points:
        (xl, xh), (yl, yh) = p.id_accuracy.clopper_pearson(), p.ood_accuracy.clopper_pearson()
        er = "" if p.er is None else f", ER {p.er.value:+.3f} [{p.er.low:+.3f}, {p.er.high:+.3f}]"
        points.append(
            ScatterPoint(
                x=p.id_accuracy.probit(),
                y=p.ood_accuracy.probit(),
                x_err=(probit(xl), probit(xh)),
                y_err=(probit(yl), probit(yh)),
                label=f"{p.model_name} (#{p.submission_id}): ID {p.id_accuracy.value:.1%}, "
                f"OOD {p.ood_accuracy.value:.1%}{er}",
                href=f"/models/{p.submission_id}",
                highlight=p.er is not None and p.er.low > 0,
            )
        )
    xs = [v for p in points for v in (p.x_err or (p.x, p.x))]
    ys = [v for p in points for v in (p.y_err or (p.y, p.y))]
    fit = trend.fit
    line = None
    if fit is not None:
        line = FitLine(
            fit.slope,
            fit.intercept,
            fit.r2,
            f"Φ⁻¹(OOD) = {fit.intercept:.3f} + {fit.slope:.3f}·Φ⁻¹(ID), R² = {fit.r2:.3f}, "
            f"n = {fit.n}",
        )
    what = "certified accuracy at r = 0" if id_source == "smoothed" else "base accuracy"
    description = (
        f"{len(points)} entries; "
        + (line.label if line else f"no line fitted: {trend.reason}")
        + ". Entries whose effective-robustness interval lies above 0 are highlighted."
    )
    spec = scatter_chart(
        points,
        title=f"{trend.ood.key}: OOD vs ID accuracy",
        x=probit_axis(f"ID accuracy ({what}, probit scale)", xs),
        y=probit_axis("OOD certified accuracy at r = 0 (probit scale)", ys),
        fit=line,
        description=description,
        width=460,
    )
    return Figure("er-trend", spec, description)


@dataclass(frozen=True)
class MetricChart:
    metric: str
    label: str
    fit: PredictorFit | None
    figure: Figure


def metric_charts(group: SigmaGroup, trend: TrendResult) -> list[MetricChart]:
    """One scatter per model metric: probit OOD accuracy against the metric, with the pooled fit
    (one line through every entry drawn: the table's averaged per-architecture fits have no
    single intercept)."""
    key = trend.ood.key
    fits = {f.metric: f for f in group.pooled.get(key, [])}
    out = []
    for metric in group.metrics:
        if metric == ID_ACCURACY:
            continue
        rows = [e for e in group.entries if key in e.ood and metric in e.metrics]
        points = []
        for e in rows:
            low, high = e.ood[key].clopper_pearson()
            points.append(
                ScatterPoint(
                    x=float(e.metrics[metric]),
                    y=e.ood[key].probit(),
                    y_err=(probit(low), probit(high)),
                    label=f"entry #{e.name}: {metric_label(metric)} {e.metrics[metric]:.4g}, "
                    f"OOD {e.ood[key].value:.1%}",
                )
            )
        fit = fits.get(metric)
        usable = fit is not None and math.isfinite(fit.r2)
        line = (
            FitLine(
                fit.slope,
                fit.intercept,
                fit.r2,
                f"pooled over architectures: m = {fit.slope:.3g}, R² = {fit.r2:.3f}",
            )
            if usable and fit is not None
            else None
        )
        out.append(
            MetricChart(
                metric=metric,
                label=metric_label(metric),
                fit=fit if usable else None,
                figure=Figure(
                    f"metric-{metric}",
                    scatter_chart(
                        points,
                        title=f"{metric_label(metric)} vs OOD accuracy",
                        x=linear_axis(metric_label(metric), [p.x for p in points]),
                        y=probit_axis(
                            "OOD accuracy (probit)", [v for p in points for v in (p.y_err or ())]
                        ),
                        fit=line,
                        description=f"{len(points)} entries; "
                        + (line.label if line else "too few distinct values to fit"),
                    ),
                    f"{metric_label(metric)} against OOD accuracy",
                ),
            )
        )
    return out


@dataclass(frozen=True)
class PredictorRow:
    """One OOD set's row of the predictor table: (metric, fit or None, best, second best)."""

    key: str
    scope: str
    cells: list[tuple[str, ArchitectureFit | PredictorFit | None, bool, bool]]


def predictor_rows(group: SigmaGroup, view: str = "architecture") -> list[PredictorRow]:
    """Fridovich-Keil et al., NeurIPS 2022, Tables 1–3: per OOD set, m and R² of every metric,
    fitted per architecture and averaged (``view="architecture"``, the paper's) or pooled over every
    entry (``view="pooled"``); the best and second-best R² above 0.5 are marked."""
    source = group.predictors if view == "architecture" else group.pooled
    rows = []
    for trend in group.trends:
        fits: dict[str, Any] = {f.metric: f for f in source.get(trend.ood.key, [])}
        usable = {m: f for m, f in fits.items() if math.isfinite(f.r2)}
        ranked = sorted((f.r2 for f in usable.values() if f.r2 > GOOD_R2), reverse=True)
        best = ranked[0] if ranked else None
        second = ranked[1] if len(ranked) > 1 else None
        cells = [
            (
                m,
                usable.get(m),
                m in usable and usable[m].r2 == best,
                m in usable and usable[m].r2 == second and second != best,
            )
            for m in group.metrics
        ]
        rows.append(PredictorRow(trend.ood.key, trend.ood.scope, cells))
    return rows
