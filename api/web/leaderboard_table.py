"""The leaderboard page's table: each entry's row rendered to HTML once per board snapshot, and
what the page shows of its benchmark rendered once per board counter value.

Rendering 50 rows of ~25 cells through Jinja cost the page 30-45 ms of CPU per request at
10,000 entries, 13x the REST page of the same query (issue 35 §1: ``Template.render``,
``Environment.getattr`` and ``escape`` were 84 % of the profile). A row's HTML depends on its
entry alone except in three places that depend on the page: the rank, the "tied with #k" badge
(the sort key and the entry above) and the ER cell (the entries the viewer can see). So the row
macro (``templates/_leaderboard_row.html``) is rendered once per entry with a marker in each of
those places, split at the markers and kept in the board snapshot's ``memo``
(``models.boards.snapshots.Board.memo``), which goes with the snapshot when the board counter
moves; a page joins the pieces with its ranks, badges and cells, as the REST page splices rows
serialised once per snapshot (``api.services.leaderboard_page``). :func:`fresh_rows` renders
the same macro with the page's values: the reference the tests hold the joined rows to, byte for
byte. A row carries nothing that depends on the viewer: which rows a viewer gets is decided by
the snapshot's visibility mask before any row is read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from markupsafe import Markup
from sqlalchemy.orm import Session

from api.schemas.benchmark import BenchmarkPublic
from api.schemas.leaderboard import LeaderboardPublic, LeaderboardRowPublic
from api.services.analysis_data import has_analysis
from api.services.leaderboard_page import Plan
from api.web.leaderboard_view import Column, metric_columns
from api.web.rendering import templates
from models.boards import leaderboard as lb
from models.boards import snapshots
from models.db.entities import Benchmark

__all__ = ["Frame", "frame", "fresh_rows", "has_er_column", "rows", "sources_by_repo"]

#: Where a memoised row takes its page's values (markup: an entry's text is escaped, so no
#: model name or author can contain one).
_RANK, _TIE, _ER = (Markup(f"<!--certbench:{name}-->") for name in ("rank", "tie", "er"))


@dataclass(frozen=True)
class Frame:
    """What a leaderboard page shows of its benchmark, valid for one board counter value."""

    benchmark: Benchmark
    """The definition (detached, read-only: ``models.boards.snapshots.benchmark_named``)."""
    public: BenchmarkPublic
    """Its public shape with ``entries`` 0 and no data fields (both are set per request)."""
    columns: list[Column]
    sort_keys: dict[str, str]
    repos: dict[str, list[tuple[str, str | None]]]
    analysis_link: bool
    version: tuple[int | None, int]
    """The board counter (epoch, version) it was built at, which this request read."""


def frame(session: Session, name: str) -> Frame:
    """The benchmark's page frame, built once per board counter value (a definition change
    moves it). Raises NotFoundError for an unknown benchmark, naming close matches."""
    benchmark, version = snapshots.benchmark_named(session, name)

    def build() -> Frame:
        public = BenchmarkPublic.of(benchmark, entries=0)
        return Frame(
            benchmark=benchmark,
            public=public,
            columns=metric_columns(public),
            sort_keys=lb.benchmark_sort_keys(benchmark),
            repos=sources_by_repo(public),
            analysis_link=has_analysis(session, name),
            version=version,
        )

    return snapshots.derived(session, ("web_leaderboard_frame", name), build, version)


def sources_by_repo(bench: BenchmarkPublic) -> dict[str, list[tuple[str, str | None]]]:
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


def _macros() -> Any:
    return templates.env.get_template("_leaderboard_row.html").module


def has_er_column(planned: Plan) -> bool:
    """Whether the page shows the ER column (an OOD board with a fit for a row of the page)."""
    return any(row.submission_id in planned.er for row in planned.page.rows)


def rows(planned: Plan, columns: list[Column], sort_label: str) -> Markup:
    """The page's ``<tr>`` rows: each entry's memoised pieces joined with the page's rank, tie
    badge and ER cell."""
    macros = _macros()
    memo = planned.page.memo
    er_column = has_er_column(planned)
    out = []
    for row in planned.page.rows:
        key = ("row_html", row.submission_id)
        pieces = memo.get(key)
        if pieces is None:
            pieces = memo[key] = _pieces(macros, planned, row, columns)
        head, middle, cells, tail = pieces
        tie = planned.ties.get(row.submission_id)
        badge = macros.tie_badge(tie.rank_above, tie.test.p_value, sort_label) if (
            tie is not None and tie.tied) else ""  # fmt: skip
        er = macros.er_cell(planned.er.get(row.submission_id)) if er_column else ""
        out.append(f"{head}{row.rank}{middle}{badge}{cells}{er}{tail}")
    return Markup("".join(out))


def _public_row(planned: Plan, row: lb.LeaderboardRow) -> LeaderboardRowPublic:
    return LeaderboardPublic.of(replace(planned.page, rows=[row])).rows[0]


def _pieces(
    macros: Any, planned: Plan, row: lb.LeaderboardRow, columns: list[Column]
) -> tuple[str, str, str, str]:
    """The row rendered with markers, split at them: the four pieces around rank, badge, ER."""
    html = str(macros.row(_public_row(planned, row), columns, _RANK, _TIE, _ER))
    head, found_rank, rest = html.partition(_RANK)
    middle, found_tie, rest = rest.partition(_TIE)
    cells, found_er, tail = rest.partition(_ER)
    if not (found_rank and found_tie and found_er) or _RANK in tail:
        raise AssertionError("the leaderboard row macro lost a marker: rank, tie, er once each")
    return head, middle, cells, tail


def fresh_rows(public: LeaderboardPublic, columns: list[Column], sort_label: str) -> Markup:
    """The rows of the public model of the same page (``api.services.leaderboard_page.
    leaderboard`` with effective robustness), each rendered whole by the row macro with no
    memo: the reference :func:`rows` must equal."""
    macros = _macros()
    er_column = any(row.effective_robustness is not None for row in public.rows)
    out = []
    for row in public.rows:
        badge = ""
        if row.tied_with and row.tie is not None:
            badge = macros.tie_badge(row.tied_with, row.tie.test.p_value, sort_label)
        er = macros.er_cell(row.effective_robustness) if er_column else ""
        out.append(str(macros.row(row, columns, row.rank, badge, er)))
    return Markup("".join(out))
