"""``/api/v1/leaderboards/{benchmark}/export`` and ``.../compare/export``: what goes into a paper.

LaTeX (booktabs) or CSV tables with 95 % intervals and "tied" marks, and BibTeX of each shown
entry's paper and of the benchmark's papers (``api.exports``). ``columns`` picks the columns by
key or label; by default the LaTeX table has the papers' layout and the CSV every column.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response

from api import exports
from api.deps import OptionalUser, SessionDep, SettingsDep
from api.errors import ERROR_RESPONSES
from api.exports import ExportFormat
from api.routes.leaderboards import _ids
from api.schemas.benchmark import BenchmarkPublic
from api.services import leaderboard_page as page_service
from api.services import leaderboards as service
from certbench.smoothing import RADII
from models.boards.leaderboard import SORT_COLUMNS, LeaderboardQuery
from models.core.errors import IntakeError

router = APIRouter(prefix="/leaderboards", tags=["exports"], responses=ERROR_RESPONSES)
FORMAT_HELP = "latex (a booktabs table float), csv (each figure with _low and _high) or bibtex"
COLUMNS_HELP = (
    "the table's columns, in order: keys or the labels the page shows, any case, repeated or "
    "comma-separated (e.g. model,sigma,r = 0.5,ACR,p_A median); default: the papers' layout in "
    "LaTeX (model, σ, certified accuracy at each radius, ACR), every column in CSV; 422 "
    "invalid_columns names the benchmark's columns"
)
Columns = Annotated[list[str] | None, Query(max_length=2000, description=COLUMNS_HELP)]
TEXT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "the export as text",
        "content": {m: {"schema": {"type": "string"}} for m, _ in exports.MEDIA_TYPES.values()},
    }
}


def _text(body: str, fmt: ExportFormat, stem: str) -> Response:
    media_type, suffix = exports.MEDIA_TYPES[fmt]
    return Response(
        body,
        media_type=f"{media_type}; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{stem}.{suffix}"'},
    )


@router.get("/{benchmark}/export", response_class=Response, responses=TEXT_RESPONSES)
def export_leaderboard(
    session: SessionDep,
    settings: SettingsDep,
    viewer: OptionalUser,
    benchmark: str,
    format: Annotated[ExportFormat, Query(description=FORMAT_HELP)] = ExportFormat.latex,
    sort: Annotated[
        str,
        Query(
            max_length=64,
            description="as for the leaderboard: a figure key or column (422 invalid_sort "
            "names the benchmark's keys)",
            json_schema_extra={"enum": sorted(SORT_COLUMNS)},
        ),
    ] = "macr",
    order: Literal["asc", "desc"] = "desc",
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    sigma: Annotated[float | None, Query(gt=0, le=10)] = None,
    columns: Columns = None,
) -> Response:
    """The leaderboard page as a table (``columns``; LaTeX: model, σ, certified accuracy at
    each radius and ACR, with 95 % intervals; CSV: rank, model, σ, architecture, every figure
    with its interval, "tied with #k") or the BibTeX of its entries' and the benchmark's
    papers."""
    query = LeaderboardQuery(sort=sort, order=order, offset=offset, limit=limit, sigma=sigma)
    board = page_service.leaderboard(session, benchmark, query, viewer=viewer, settings=settings)
    bench = service.benchmark(session, benchmark, viewer=viewer)
    if format == ExportFormat.bibtex:
        refs = exports.references(exports.Entry.rows_of(board), bench)
        return _text(exports.bibtex(refs), format, benchmark)
    chosen = _columns(bench, format, columns, ranked=True)
    table = exports.leaderboard_table(board, bench, chosen)
    return _text(exports.render_tables([table], format), format, benchmark)


def _columns(
    bench: BenchmarkPublic, fmt: ExportFormat, wanted: list[str] | None, *, ranked: bool
) -> list[exports.Column]:
    try:
        return exports.table_columns(bench, fmt, wanted, ranked=ranked)
    except exports.ColumnError as err:
        raise IntakeError(str(err), code="invalid_columns") from err


@router.get("/{benchmark}/compare/export", response_class=Response, responses=TEXT_RESPONSES)
def export_comparison(
    session: SessionDep,
    settings: SettingsDep,
    viewer: OptionalUser,
    benchmark: str,
    ids: Annotated[list[str], Query(description="2 to 10 submission ids, as for /compare")],
    format: Annotated[ExportFormat, Query(description=FORMAT_HELP)] = ExportFormat.latex,
    table: Annotated[
        Literal["entries", "paired"],
        Query(description="CSV only: the entries side by side, or the paired tests"),
    ] = "entries",
    columns: Columns = None,
) -> Response:
    """The compared entries (their figures with intervals) and the paired tests between them
    (both tables in LaTeX; one, chosen by ``table``, in CSV), or their BibTeX."""
    parsed = list(dict.fromkeys(_ids(ids)))
    comparison = service.compare(
        session, benchmark, parsed, radii=list(RADII), viewer=viewer, settings=settings
    )
    entries = [exports.Entry.of_results(service.results(session, i, viewer=viewer)) for i in parsed]
    bench = service.benchmark(session, benchmark, viewer=viewer)
    stem = f"{benchmark}-compare"
    if format == ExportFormat.bibtex:
        return _text(exports.bibtex(exports.references(entries, bench)), format, stem)
    chosen = _columns(bench, format, columns, ranked=False)
    figures = [c.key for c in chosen if c.numeric] if columns else None  # asked: those tested
    tables = [
        exports.compare_table(entries, bench, chosen),
        exports.paired_table(comparison, bench, figures),
    ]
    if format == ExportFormat.csv and table == "paired":
        tables = tables[1:]
    return _text(exports.render_tables(tables, format), format, stem)
