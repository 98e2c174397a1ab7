"""HTML pages of the leaderboard: server-rendered with Jinja2, reading only the service layer.

Every page works without JavaScript (tables, forms, links and SVG figures are all in the HTML);
``static/certbench.js`` only adds conveniences. Errors become HTML pages with the same status
codes the REST API uses (``api.errors.status_for``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from pydantic import Field

from api.benchmark_schemas import BenchmarkPublic
from api.deps import MAX_ID, RowId, SessionDep, SettingsDep
from api.errors import status_for
from api.result_schemas import ResultsPublic
from api.services import leaderboards as lb_service
from api.services import submissions as sub_service
from api.services.analysis_data import has_analysis
from api.web import figures
from api.web import stages as stage_web
from api.web.auth import (
    WebViewer,
    check_same_origin,
    clear_token_cookie,
    set_token_cookie,
)
from api.web.datasets import (
    card_figures,
    figure_file,
    local_configs,
    sample_grid_png,
    spectra_chart,
)
from api.web.leaderboard_view import (
    DEFAULT_PAGE_SIZE,
    PAGE_SIZES,
    Filters,
    Pager,
    certified_columns,
    metric_columns,
)
from certbench.architectures import available_architectures
from certbench.errors import CertbenchError
from certbench.metrics import RADII
from models.accounts import authenticate
from models.catalog import get_benchmark
from models.errors import AuthenticationError, IntakeError, NotFoundError
from models.leaderboard import LeaderboardQuery
from models.states import ACTIVE_STATES
from models.submissions import get_visible

WEB_DIR = Path(__file__).parent
templates = Jinja2Templates(directory=WEB_DIR / "templates")
MAX_COMPARE = 4
OVERLAY_OTHERS = 3
HOME_TOP = 3


# ---- formatting helpers available in every template ------------------------------------------


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f}%"


def _fixed(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _date(value: Any) -> str:
    return value.strftime("%Y-%m-%d") if value else "–"


def _datetime(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC") if value else "–"


def _metric(value: float | None, kind: str) -> str:
    if kind == "percent":
        return _percent(value)
    return _fixed(value)


def _count(value: float | None) -> str:
    """A count or rate with thousands separators ("1,900"); small rates keep a decimal."""
    if value is None:
        return "–"
    return f"{value:,.1f}" if 0 < abs(value) < 10 and value != int(value) else f"{value:,.0f}"


def _duration(seconds: float | None) -> str:
    """A time span as people say it: "about 3 min", "about 2 h 10 min", "about 3 days 4 h"."""
    if seconds is None:
        return "–"
    minutes = round(seconds / 60)
    if seconds < 60:
        return f"about {max(1, round(seconds))} s"
    if minutes < 60:
        return f"about {minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"about {hours} h {minutes} min" if minutes else f"about {hours} h"
    days, hours = divmod(hours, 24)
    return f"about {days} day{'s' if days > 1 else ''} {hours} h"


templates.env.filters.update(
    percent=_percent,
    fixed=_fixed,
    date=_date,
    datetime=_datetime,
    metric=_metric,
    count=_count,
    duration=_duration,
)
templates.env.globals.update(max_compare=MAX_COMPARE)


# ---- errors as HTML ---------------------------------------------------------------------------


class HTMLRoute(APIRoute):
    """Service errors and bad query strings render the error page instead of JSON."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()

        async def render_errors(request: Request) -> Response:
            try:
                return await handler(request)
            except CertbenchError as err:
                if status_for(err) == 500:
                    raise  # not a client error: the app's handler logs it and answers 500
                return _error_page(request, status_for(err), str(err))
            except RequestValidationError as err:
                fields = "; ".join(
                    f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}"
                    for e in err.errors()
                )
                return _error_page(request, 422, f"invalid request: {fields}")

        return render_errors


def _error_page(request: Request, status: int, message: str) -> Response:
    response = templates.TemplateResponse(
        request,
        "error.html",
        {"status": status, "message": message, "viewer": None},
        status_code=status,
    )
    if status == 401:
        clear_token_cookie(response)
    return response


router = APIRouter(route_class=HTMLRoute, include_in_schema=False)
#: Ids in query strings, bounded like ``RowId`` so an absurd id is a 422 page, never a 500.
WebId = Annotated[int, Field(ge=1, le=MAX_ID)]


def render(
    request: Request, template: str, context: dict[str, Any], *, status_code: int = 200
) -> HTMLResponse:
    """Render a page; drop a cookie whose token stopped working since sign-in."""
    response = templates.TemplateResponse(request, template, context, status_code=status_code)
    if getattr(request.state, "stale_cookie", False):
        clear_token_cookie(response)
    return response


# ---- home -------------------------------------------------------------------------------------


@router.get("/", response_class=HTMLResponse, name="web_home")
def home(
    request: Request, session: SessionDep, settings: SettingsDep, viewer: WebViewer
) -> HTMLResponse:
    """Benchmarks grouped by base dataset, with their dataset links and current top entries (and
    "data not available here" with the fix where this machine lacks a benchmark's data)."""
    benchmarks = lb_service.benchmarks(session, viewer=viewer, settings=settings)
    cards = []
    for bench in benchmarks:
        top = lb_service.leaderboard(
            session, bench.name, LeaderboardQuery(limit=HOME_TOP), viewer=viewer
        )
        cards.append({"benchmark": bench, "top": top.rows, "repos": _sources_by_repo(bench)})
    groups: dict[str, list[dict[str, Any]]] = {}
    for card in cards:
        groups.setdefault(card["benchmark"].base_dataset, []).append(card)
    # Groups a visitor can submit to here come first (on a fresh machine: the demo benchmark).
    ordered = sorted(
        groups.items(),
        key=lambda group: all(c["benchmark"].data_available is False for c in group[1]),
    )
    return render(request, "home.html", {"viewer": viewer, "groups": dict(ordered)})


def _sources_by_repo(bench: BenchmarkPublic) -> dict[str, list[tuple[str, str | None]]]:
    """Each dataset repo of a benchmark → where this server reads its test sets from: distinct
    (``DataSourcePublic.where`` text, Hub link or None). A local folder is never shown as the
    Hub."""
    repos: dict[str, list[tuple[str, str | None]]] = {}
    for test_set in sorted(bench.test_sets, key=lambda t: t.dataset_repo):
        source = test_set.source
        where = (source.where(), test_set.hub_url)
        wheres = repos.setdefault(test_set.dataset_repo, [])
        if where not in wheres:
            wheres.append(where)
    return repos


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
) -> HTMLResponse:
    """Ranked entries, sorted and filtered server-side; one page of rows per request. A sort
    key the benchmark lacks is the 422 error page naming its keys (as in REST)."""
    filters = Filters(
        sort=sort,
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
    )
    board = lb_service.leaderboard(
        session, benchmark, filters.query(), viewer=viewer, settings=settings
    )
    # The page needs the benchmark's description, not its entry count: the service's count query
    # would double the page's database time, and ``board.total`` already counts this view.
    found = get_benchmark(session, benchmark)
    bench = BenchmarkPublic.of(found, entries=board.total).model_copy(
        update=lb_service.data_fields(found, settings)
    )
    board = lb_service.with_effective_robustness(session, board, viewer=viewer)
    return render(
        request,
        "leaderboard.html",
        {
            "viewer": viewer,
            "benchmark": bench,
            "board": board,
            "er_column": any(r.effective_robustness is not None for r in board.rows),
            "analysis_link": has_analysis(session, benchmark),
            "columns": metric_columns(bench),
            "filters": filters,
            "sort_label": bench.sort_keys[filters.sort],
            "repos": _sources_by_repo(bench),
            "pager": Pager.of(total=board.total, page=page, per_page=per_page),
            "page_sizes": PAGE_SIZES,
            "architectures": available_architectures(),
        },
    )


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
    classifier's robustness (seed 004), provenance."""
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
        "manifest_json": json.dumps(results.manifest, indent=2, sort_keys=True),
        "charts": {},
        "active": results.state in ACTIVE_STATES,
    }
    context["stage_sections"] = stage_web.sections(results, bench)
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
    return render(request, "model.html", context)


@router.get("/models/{submission_id}/files/{stage}/{name}", name="web_stage_file")
def stage_file(
    session: SessionDep,
    settings: SettingsDep,
    viewer: WebViewer,
    submission_id: int,
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
    board = lb_service.leaderboard(
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
    """Two to four entries of one benchmark side by side, their curves overlaid."""
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
    charts: dict[str, Any] = {
        "certified": figures.overlay_certified_chart(curves, chart_id="compare-cert-acc")
    }
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
    return render(
        request,
        "compare.html",
        {
            "viewer": viewer,
            "benchmark": bench,
            "entries": list(zip(entries, submissions, strict=True)),
            "columns": metric_columns(bench),
            "charts": charts,
            "corruptions": corruptions,
            "corruption_names": list(corruption_bands),
            "corruption_bands": corruption_bands,
            "stage_sections": stage_web.compare_sections(entries, bench),
            "paired": paired,
            "paired_problem": paired_problem,
            "names": {e.submission_id: _label(e) for e in entries},
        },
    )


# ---- sign-in and submissions (owner pages) ----------------------------------------------------


def _safe_next(target: str) -> str:
    """Only same-site paths are followed after sign-in (no open redirect)."""
    if target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/submissions"


@router.get("/login", response_class=HTMLResponse, name="web_login")
def login_form(
    request: Request, viewer: WebViewer, next: Annotated[str, Query(max_length=500)] = ""
) -> HTMLResponse:
    return render(request, "login.html", {"viewer": viewer, "next": _safe_next(next), "error": ""})


@router.post("/login", name="web_login_post")
def login(
    request: Request,
    session: SessionDep,
    token: Annotated[str, Form(max_length=200)],
    next: Annotated[str, Form(max_length=500)] = "",
) -> Response:
    """Check the API token and keep it in an HttpOnly cookie (see ``api.web.auth``)."""
    check_same_origin(request)
    try:
        authenticate(session, token.strip())
    except AuthenticationError as err:
        return render(
            request,
            "login.html",
            {"viewer": None, "next": _safe_next(next), "error": str(err)},
            status_code=401,
        )
    response = RedirectResponse(_safe_next(next), status_code=303)
    set_token_cookie(request, response, token.strip())
    return response


@router.post("/logout", name="web_logout")
def logout(request: Request) -> Response:
    check_same_origin(request)
    response = RedirectResponse("/", status_code=303)
    clear_token_cookie(response)
    return response


def _sign_in_first(request: Request) -> RedirectResponse:
    return RedirectResponse(f"/login?next={request.url.path}", status_code=303)


@router.get("/submissions", response_class=HTMLResponse, name="web_submissions")
def my_submissions(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: WebViewer,
    page: Annotated[int, Query(ge=1, le=100_000)] = 1,
) -> Response:
    """The signed-in user's submissions, newest first."""
    if viewer is None:
        return _sign_in_first(request)
    listing = sub_service.list_own(
        session, user=viewer, state=None, offset=(page - 1) * DEFAULT_PAGE_SIZE,
        limit=DEFAULT_PAGE_SIZE, settings=settings,
    )  # fmt: skip
    pager = Pager.of(total=listing.total, page=page, per_page=DEFAULT_PAGE_SIZE)
    return render(
        request, "submissions.html", {"viewer": viewer, "listing": listing, "pager": pager}
    )


@router.get("/submissions/{submission_id}", response_class=HTMLResponse, name="web_status")
def submission_status(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: WebViewer,
    submission_id: RowId,
) -> Response:
    """State, reason, progress of every stage and unit, throughput, ETA, the estimated work and
    the queue position; refreshes while active. The figures are ``/progress``'s."""
    if viewer is None:
        return _sign_in_first(request)
    status, report = sub_service.status_with_progress(
        session, submission_id, viewer=viewer, settings=settings
    )
    return render(
        request,
        "status.html",
        {
            "viewer": viewer,
            "s": status,
            "p": report,
            "active": status.state in ACTIVE_STATES,
        },
    )


@router.post("/submissions/{submission_id}/cancel", name="web_cancel")
def cancel_submission(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: WebViewer,
    submission_id: RowId,
) -> Response:
    check_same_origin(request)
    if viewer is None:
        return _sign_in_first(request)
    sub_service.cancel(session, submission_id, user=viewer, settings=settings)
    return RedirectResponse(f"/submissions/{submission_id}", status_code=303)


# ---- datasets ---------------------------------------------------------------------------------


@router.get("/datasets", response_class=HTMLResponse, name="web_datasets")
def datasets_page(request: Request, session: SessionDep, viewer: WebViewer) -> HTMLResponse:
    return render(
        request, "datasets.html", {"viewer": viewer, "datasets": lb_service.datasets(session)}
    )


def _dataset(session: SessionDep, repo: str) -> Any:
    for dataset in lb_service.datasets(session):
        if dataset.repo == repo:
            return dataset
    raise NotFoundError(f"dataset {repo!r} is not used by any benchmark")


@router.get("/datasets/{owner}/{name}", response_class=HTMLResponse, name="web_dataset")
def dataset_page(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: WebViewer,
    owner: str,
    name: str,
) -> HTMLResponse:
    """Configs with their ``load_dataset`` one-liners; sample grids and spectra when local."""
    repo = f"{owner}/{name}"
    dataset = _dataset(session, repo)
    local = local_configs(session, repo, settings=settings)
    spectra, problem = None, ""
    try:
        spectra = spectra_chart(local)
    except NotFoundError as err:  # a broken local copy: the page still lists configs and links
        problem = str(err)
    return render(
        request,
        "dataset.html",
        {
            "viewer": viewer,
            "dataset": dataset,
            "local": local,
            "figures": sorted(card_figures(local)),
            "spectra": spectra,
            "problem": problem,
        },
    )


@router.get("/datasets/{owner}/{name}/samples/{config}.png", name="web_dataset_samples")
def dataset_samples(
    session: SessionDep, settings: SettingsDep, owner: str, name: str, config: str
) -> Response:
    local = local_configs(session, f"{owner}/{name}", settings=settings)
    if config not in local:
        raise NotFoundError(f"config {config!r} of {owner}/{name} has no local copy")
    return Response(
        sample_grid_png(local[config]),
        media_type="image/png",
        headers={"Cache-Control": "public, max-age=3600"},
    )


@router.get("/datasets/{owner}/{name}/figures/{filename}", name="web_dataset_figure")
def dataset_figure(
    session: SessionDep, settings: SettingsDep, owner: str, name: str, filename: str
) -> FileResponse:
    local = local_configs(session, f"{owner}/{name}", settings=settings)
    return FileResponse(figure_file(local, filename))
