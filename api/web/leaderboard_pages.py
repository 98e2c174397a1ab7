"""Public pages of the leaderboard: home (benchmarks with their top entries), a benchmark's
ranked entries, one entry's model page (and the figure files its stages stored) and the
side-by-side comparison of two to four entries. Server-rendered with Jinja2
(``api.web.rendering``), reading only the service layer, like the REST API.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, Response

from api import exports
from api.deps import QueryId, RowId, SessionDep, SettingsDep
from api.schemas.benchmark import BenchmarkPublic
from api.schemas.result import ResultsPublic
from api.services import leaderboard_page as page_service
from api.services import leaderboards as lb_service
from api.services import submissions as sub_service
from api.web import figure_files, figures, leaderboard_table
from api.web import stages as stage_web
from api.web.auth import WebViewer
from api.web.leaderboard_view import (
    DEFAULT_PAGE_SIZE,
    PAGE_SIZES,
    Filters,
    Pager,
    certified_columns,
    metric_columns,
)
from api.web.rendering import MAX_COMPARE, HTMLRoute, render, rendered, templates
from api.web.reproduce import reproduction
from certbench.nets import ARCHITECTURE_NAMES
from certbench.smoothing import RADII
from models.boards import snapshots
from models.boards.leaderboard import LeaderboardQuery, resolve_sort
from models.core.errors import IntakeError, NotFoundError
from models.db import board_version
from models.db.entities import User
from models.db.states import ACTIVE_STATES, SubmissionState
from models.submissions.queries import get_visible

router = APIRouter(route_class=HTMLRoute, include_in_schema=False)
#: Ids in query strings, read like ``RowId`` (``api.deps.parse_id``): a 422 page, never a 500.
WebId = QueryId
OVERLAY_OTHERS = 3
HOME_TOP = 3


# ---- home -------------------------------------------------------------------------------------


@router.get("/", response_class=HTMLResponse, name="web_home")
def home(
    request: Request, session: SessionDep, settings: SettingsDep, viewer: WebViewer
) -> HTMLResponse:
    """Benchmarks grouped by base dataset, with their dataset links and current top entries (and
    "data not available here" with the fix where this machine lacks a benchmark's data)."""
    benchmarks = lb_service.benchmarks(session, viewer=viewer, settings=settings)
    cards: list[dict[str, Any]] = []
    for bench in benchmarks:
        top = page_service.leaderboard(
            session, bench.name, LeaderboardQuery(limit=HOME_TOP), viewer=viewer
        )
        cards.append(
            {"benchmark": bench, "top": top.rows, "repos": leaderboard_table.sources_by_repo(bench)}
        )
    groups: dict[str, list[dict[str, Any]]] = {}
    for card in cards:
        groups.setdefault(card["benchmark"].base_dataset, []).append(card)
    # Groups a visitor can submit to here come first (on a fresh machine: the demo benchmark).
    ordered = sorted(
        groups.items(),
        key=lambda group: all(c["benchmark"].data_available is False for c in group[1]),
    )
    return render(request, "home.html", {"viewer": viewer, "groups": dict(ordered)})


# ---- leaderboard ------------------------------------------------------------------------------


def _parse_sigma(sigma: str) -> float | None:
    if not sigma:
        return None
    try:
        value = float(sigma)
    except ValueError as err:
        raise IntakeError(
            f"sigma={sigma!r} is not a number; pick a σ from the list or leave it empty",
            code="invalid_request",
        ) from err
    if not math.isfinite(value) or value <= 0:
        raise IntakeError(f"sigma={sigma!r} must be a positive number", code="invalid_request")
    return value


@router.get("/leaderboards/{benchmark}", response_class=HTMLResponse, name="web_leaderboard")
def leaderboard_page(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: WebViewer,
    benchmark: str,
    sort: Annotated[str, Query(max_length=32)] = "macr",
    order: Annotated[str, Query(pattern="^(asc|desc)$")] = "desc",
    page: Annotated[int, Query(ge=1, le=100_000)] = 1,
    per_page: Annotated[int, Query(ge=1, le=200)] = DEFAULT_PAGE_SIZE,
    search: Annotated[str, Query(max_length=100)] = "",
    sigma: Annotated[str, Query(max_length=16)] = "",
    architecture: Annotated[str, Query(max_length=64)] = "",
    extra_data: Annotated[str, Query(pattern="^(|yes|no)$")] = "",
    venue: Annotated[str, Query(max_length=64)] = "",
    baseline: Annotated[str, Query(pattern="^(|only|exclude)$")] = "",
    flagged: Annotated[str, Query(pattern="^(|only|exclude)$")] = "",
    denoiser: Annotated[str, Query(pattern="^(|none|any|diffusion|dncnn)$")] = "",
) -> HTMLResponse:
    """Ranked entries, sorted and filtered server-side; one page of rows per request. A sort
    key the benchmark lacks is the 422 error page naming its keys (as in REST).

    What the page shows of the benchmark is built once per board counter value and each row's
    cells once per board snapshot (``api.web.leaderboard_table``); a request renders the rest."""
    frame = leaderboard_table.frame(session, benchmark)
    filters = Filters(
        sort=resolve_sort(sort, frame.sort_keys),
        order=order,
        page=page,
        per_page=per_page,
        search=search.strip(),
        sigma=_parse_sigma(sigma),
        architecture=architecture,
        extra_data=extra_data,
        venue=venue.strip(),
        baseline=baseline,
        flagged=flagged,
        denoiser=denoiser,
    )
    planned = page_service.plan(
        session, benchmark, filters.query(), viewer=viewer, settings=settings,
        effective_robustness=True, version=frame.version,
    )  # fmt: skip
    # ``board.total`` counts this view: the service's entry count query is not needed here.
    bench = frame.public.model_copy(
        update={"entries": planned.page.total,
                **lb_service.data_fields(frame.benchmark, settings)}
    )  # fmt: skip
    sort_label = frame.sort_keys[filters.sort]
    return render(
        request,
        "leaderboard.html",
        {
            "viewer": viewer,
            "benchmark": bench,
            "board": planned.page,
            "rows": leaderboard_table.rows(planned, frame.columns, sort_label),
            "er_column": leaderboard_table.has_er_column(planned),
            "analysis_link": frame.analysis_link,
            "columns": frame.columns,
            "filters": filters,
            "sort_label": sort_label,
            "repos": frame.repos,
            "pager": Pager.of(total=planned.page.total, page=page, per_page=per_page),
            "page_sizes": PAGE_SIZES,
            "architectures": list(ARCHITECTURE_NAMES),
            "export_columns": exports.picker(frame.public),
        },
    )


def manifest_fields(manifest: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """The manifest as (field, value) lines a person reads: nested fields joined with " › ",
    lists as comma-separated values, nothing escaped."""
    out: list[tuple[str, str]] = []
    for key, value in manifest.items():
        name = f"{prefix} › {key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out += manifest_fields(value, name)
        elif isinstance(value, list):
            out.append((name, ", ".join(str(v) for v in value) or "–"))
        else:
            out.append((name, "–" if value in (None, "", {}) else str(value)))
    return out


def metric_labels(bench: BenchmarkPublic) -> dict[str, str]:
    """Figure key → the label users see (the leaderboard's headers), for tables of tests."""
    return {**bench.sort_keys, **{c.key: c.header for c in metric_columns(bench)}}


# ---- model page -------------------------------------------------------------------------------


def _label(results: ResultsPublic) -> str:
    return f"{results.model_name} (#{results.submission_id})"


@router.get("/models/{submission_id}", response_class=HTMLResponse, name="web_model")
def model_page(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: WebViewer,
    submission_id: RowId,
) -> HTMLResponse:
    """Everything about one entry: curves, p_A distribution, CIFAR-F maps, bands, the base
    classifier's robustness (Muthukumar et al. 2025, arXiv:2501.18098), provenance."""
    context = _model_context(session, settings, viewer, submission_id)
    context["figure_base"] = f"/models/{submission_id}/figures"
    return render(request, "model.html", context)


@router.get("/models/{submission_id}/figures/{name}.{fmt}", name="web_model_figure")
def model_figure(
    session: SessionDep,
    settings: SettingsDep,
    viewer: WebViewer,
    submission_id: RowId,
    name: figure_files.FigureName,
    fmt: figure_files.FigureFormat,
) -> Response:
    """One figure of the model page as SVG, PNG or PDF (the same spec the page draws)."""
    context = _model_context(session, settings, viewer, submission_id)
    return figure_files.figure_response(figure_files.collect(context), name, fmt)


def _model_context(
    session: SessionDep, settings: SettingsDep, viewer: WebViewer, submission_id: int
) -> dict[str, Any]:
    results = lb_service.results(session, submission_id, viewer=viewer)
    submission = sub_service.public(
        session, get_visible(session, submission_id, viewer=viewer), viewer=viewer,
        settings=settings,
    )  # fmt: skip
    bench = lb_service.benchmark(session, results.benchmark, viewer=viewer)
    context: dict[str, Any] = {
        "viewer": viewer,
        "results": results,
        "submission": submission,
        "benchmark": bench,
        "columns": certified_columns(bench),
        "evaluator_versions": sorted({r.evaluator_version for r in results.results}),
        "manifest_fields": manifest_fields(results.manifest),
        "manifest_json": json.dumps(results.manifest, indent=2, sort_keys=True, ensure_ascii=False),
        "charts": {},
        "active": results.state in ACTIVE_STATES,
    }
    context["stage_sections"] = stage_web.sections(results, bench)
    context["reproduce"] = reproduction(results, bench)
    context["data_pins_rows"] = stage_web.data_pins_rows(results)
    if results.results:
        curves = figures.set_curves(session, results, viewer=viewer, settings=settings)
        context["charts"]["certified"] = figures.certified_accuracy_chart(results, curves)
        context["from_records"] = all(c.from_records for c in curves)
        others = _other_entries(session, results, submission.sigma, viewer=viewer)
        entries = [figures.EntryCurves(_label(results), submission_id, curves)]
        for other in others:
            entries.append(
                figures.EntryCurves(
                    _label(other),
                    other.submission_id,
                    figures.set_curves(session, other, viewer=viewer, settings=settings),
                )
            )
        context["others"] = others
        if figures.mean_pa(curves) is not None:
            context["charts"]["pa"] = figures.pa_chart(
                entries, chart_id="pa-ecdf", emphasis=submission_id
            )
        if figures.is_fourier(results.results):
            context["charts"]["fourier_heatmap"] = figures.fourier_heatmap(results)
            context["charts"]["fourier_lines"] = figures.fourier_lines(results)
        context["corruptions"] = figures.corruption_rows(results.results)
    return context


@router.get("/models/{submission_id}/files/{stage}/{name}", name="web_stage_file")
def stage_file(
    session: SessionDep,
    settings: SettingsDep,
    viewer: WebViewer,
    submission_id: RowId,
    stage: str,
    name: str,
) -> FileResponse:
    """A figure a stage stored with a finished entry's results (e.g. the weather attack's
    clean / random / attacked / difference panels); only files its results list are served."""
    path, media_type = lb_service.stage_file(
        session, submission_id, stage, name, viewer=viewer, settings=settings
    )
    return FileResponse(
        path,
        media_type=media_type,
        headers={"Cache-Control": "private, max-age=3600", "X-Content-Type-Options": "nosniff"},
    )


def _other_entries(
    session: SessionDep, results: ResultsPublic, sigma: float, *, viewer: WebViewer
) -> list[ResultsPublic]:
    """The best other entries at the same σ (by mACR), to overlay for comparison."""
    board = page_service.leaderboard(
        session,
        results.benchmark,
        LeaderboardQuery(sigma=sigma, limit=OVERLAY_OTHERS + 1),
        viewer=viewer,
    )
    ids = [r.submission_id for r in board.rows if r.submission_id != results.submission_id]
    return [lb_service.results(session, i, viewer=viewer) for i in ids[:OVERLAY_OTHERS]]


# ---- compare ----------------------------------------------------------------------------------


@router.get("/compare", response_class=HTMLResponse, name="web_compare")
def compare_page(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: WebViewer,
    id: Annotated[list[WebId], Query()] = [],  # noqa: B006 (FastAPI reads the default)
) -> HTMLResponse:
    """Two to four entries of one benchmark side by side, their curves overlaid. Kept while the
    board counter stands, per viewer and entry set, once every entry has finished
    (:func:`_kept_compare`)."""
    ids = list(dict.fromkeys(id))
    version = board_version.current(session)

    def build() -> tuple[str, bool]:
        context, finished = _kept_compare(session, settings, viewer, ids, version)
        page = {**context, "viewer": viewer, "figure_base": "/compare/figures",
                "figure_query": "?" + urlencode([("id", i) for i in ids])}  # fmt: skip
        return templates.get_template("compare.html").render(page), finished

    key = ("web_compare_page", _identity(viewer), tuple(ids))
    html, _ = snapshots.derived(session, key, build, version, keep=lambda built: built[1])
    return rendered(request, html)


@router.get("/compare/figures/{name}.{fmt}", name="web_compare_figure")
def compare_figure(
    session: SessionDep,
    settings: SettingsDep,
    viewer: WebViewer,
    name: figure_files.FigureName,
    fmt: figure_files.FigureFormat,
    id: Annotated[list[WebId], Query()] = [],  # noqa: B006 (FastAPI reads the default)
) -> Response:
    """One figure of the compare page as SVG, PNG or PDF."""
    ids = list(dict.fromkeys(id))
    context, _ = _kept_compare(session, settings, viewer, ids, board_version.current(session))
    return figure_files.figure_response(figure_files.collect(context), name, fmt)


def _identity(viewer: User | None) -> tuple[int, str] | None:
    """Who a kept page was built for: None for every anonymous visitor, else the user's id and
    role. A page shows the viewer's name and what the viewer may see (private entries, hidden
    duplicates), so no two signed-in users share one; a change of name moves the board
    counter, a change of role changes this key."""
    return None if viewer is None else (viewer.id, str(viewer.role))


def _kept_compare(
    session: SessionDep,
    settings: SettingsDep,
    viewer: WebViewer,
    ids: list[int],
    version: tuple[int | None, int],
) -> tuple[dict[str, Any], bool]:
    """The compare page's context (without the viewer) and whether every entry has finished.
    Reading the entries' records for the curves and paired tests costs 70-180 ms, and they
    change only with a committed board change (a re-run, a moderation), so the context is kept
    per board counter value, viewer and entry set (``models.boards.snapshots.derived``); never
    while an entry is unfinished, whose results arrive without moving the counter."""

    def build() -> tuple[dict[str, Any], bool]:
        context = _compare_context(session, settings, viewer, ids)
        del context["viewer"]
        finished = all(e.state == SubmissionState.FINISHED for e, _ in context["entries"])
        return context, finished

    key = ("web_compare", _identity(viewer), tuple(ids))
    return snapshots.derived(session, key, build, version, keep=lambda built: built[1])


def _compare_context(
    session: SessionDep, settings: SettingsDep, viewer: WebViewer, id: list[int]
) -> dict[str, Any]:
    ids = list(dict.fromkeys(id))
    if not 2 <= len(ids) <= MAX_COMPARE:
        raise IntakeError(
            f"compare needs 2 to {MAX_COMPARE} different entries, got {len(ids)}: tick 2–4 "
            "entries on a leaderboard and press Compare",
            code="invalid_request",
        )
    entries = [lb_service.results(session, i, viewer=viewer) for i in ids]
    benchmarks = {e.benchmark for e in entries}
    if len(benchmarks) > 1:
        raise IntakeError(
            f"entries come from different benchmarks {sorted(benchmarks)}; compare entries of "
            "one benchmark",
            code="invalid_request",
        )
    bench = lb_service.benchmark(session, entries[0].benchmark, viewer=viewer)
    submissions = [
        sub_service.public(
            session, get_visible(session, i, viewer=viewer), viewer=viewer, settings=settings
        )
        for i in ids
    ]
    curves = [
        figures.EntryCurves(
            _label(e),
            e.submission_id,
            figures.set_curves(session, e, viewer=viewer, settings=settings),
        )
        for e in entries
    ]
    charts: dict[str, Any] = {}
    certified = figures.overlay_certified_chart(curves, chart_id="compare-cert-acc")
    if certified is not None:  # None: no entry has per-test-set results
        charts["certified"] = certified
    if any(figures.mean_pa(c.curves) is not None for c in curves):
        charts["pa"] = figures.pa_chart(curves, chart_id="compare-pa", emphasis=None)
    if all(figures.is_fourier(e.results) for e in entries):
        charts["fourier_panels"] = figures.fourier_panels(
            {_label(e): e for e in entries}, chart_id="compare-fourier"
        )
    corruptions = [
        {row.corruption: row for row in figures.corruption_rows(e.results)} for e in entries
    ]
    try:
        paired = lb_service.compare(
            session, bench.name, ids, radii=list(RADII), viewer=viewer, settings=settings
        )
        paired_problem = ""
    except (IntakeError, NotFoundError) as err:  # e.g. an unfinished entry: the page still shows
        paired, paired_problem = None, str(err)
    corruption_bands = {name: row.band for rows in corruptions for name, row in rows.items()}

    def records_of(submission_id: int, stage: str) -> Path | None:
        return lb_service.stage_records_file(
            session, submission_id, stage, "", viewer=viewer, settings=settings
        )

    return {
        "viewer": viewer,
        "benchmark": bench,
        "entries": list(zip(entries, submissions, strict=True)),
        "columns": metric_columns(bench),
        "charts": charts,
        "corruptions": corruptions,
        "corruption_names": list(corruption_bands),
        "corruption_bands": corruption_bands,
        "stage_sections": stage_web.compare_sections(entries, bench, records_of),
        "paired": paired,
        "paired_problem": paired_problem,
        "names": {e.submission_id: _label(e) for e in entries},
        "metric_labels": metric_labels(bench),
    }
