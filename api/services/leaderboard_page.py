"""A ranked leaderboard page: its rows, "tied with #k" marks and effective robustness, as the
public model (web pages, exports) or as the REST response's JSON bytes.

Both come from one plan (``plan``): the rows of the board snapshot (``models.boards.snapshots``),
the tie tests of adjacent rows and the ER cells. The JSON path serialises each entry's row once per
snapshot (kept in the snapshot's ``memo``) and splices rank, tie and ER into it, so a 50-row page
costs string joins rather than 50 pydantic models; ``tests/api/test_api_leaderboard_json.py``
holds it byte-equal to ``LeaderboardPublic.model_dump_json()``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.orm import Session

from api.schemas.comparison import PairedTestPublic
from api.schemas.leaderboard import (
    ERCellPublic,
    LeaderboardPublic,
    TiePublic,
)
from certbench.errors import RecordsError
from models.boards import comparisons
from models.boards import leaderboard as lb
from models.boards import snapshots as board_index
from models.core.settings import Settings
from models.db.entities import User

__all__ = ["Plan", "leaderboard", "leaderboard_json", "plan"]

#: Where a serialised row holds its per-page fields (each null in the memoised form).
_PAGE_FIELDS = '"effective_robustness":null,"tied_with":null,"tie":null,'
_RANK_PREFIX = '{"rank":0,'


@dataclass(frozen=True)
class Plan:
    """What a page shows: the rows, the tie marks and ER cells by submission id."""

    page: lb.LeaderboardPage
    ties: dict[int, TiePublic]
    er: dict[int, ERCellPublic]


def leaderboard(
    session: Session,
    name: str,
    query: lb.LeaderboardQuery,
    *,
    viewer: User | None,
    settings: Settings | None = None,
    effective_robustness: bool = False,
) -> LeaderboardPublic:
    """A page of the leaderboard as the public model. With ``settings`` (where the records
    live) each row is marked "tied with #k" when it does not differ significantly from the entry
    above in the sorted figure (``models.boards.comparisons``); with ``effective_robustness`` an OOD
    benchmark's rows carry their ER (``api.services.analysis.aggregate_er``)."""
    found = plan(session, name, query, viewer=viewer, settings=settings,
                 effective_robustness=effective_robustness)  # fmt: skip
    public = LeaderboardPublic.of(found.page)
    for row in public.rows:
        tie = found.ties.get(row.submission_id)
        if tie is not None:
            row.tie = tie
            row.tied_with = tie.rank_above if tie.tied else None
        row.effective_robustness = found.er.get(row.submission_id)
    return public


def leaderboard_json(
    session: Session,
    name: str,
    query: lb.LeaderboardQuery,
    *,
    viewer: User | None,
    settings: Settings | None = None,
) -> bytes:
    """``leaderboard(..., effective_robustness=True).model_dump_json()``, from rows serialised
    once per board snapshot."""
    found = plan(session, name, query, viewer=viewer, settings=settings, effective_robustness=True)
    head = LeaderboardPublic.of(replace(found.page, rows=[])).model_dump_json()
    rows = ",".join(_row_json(found, row) for row in found.page.rows)
    return (head.removesuffix("[]}") + "[" + rows + "]}").encode()


def _row_json(planned: Plan, row: lb.LeaderboardRow) -> str:
    memo = planned.page.memo
    key = ("row_json", row.submission_id)
    parts = memo.get(key)
    if parts is None:
        one = replace(planned.page, rows=[replace(row, rank=0)])
        text = LeaderboardPublic.of(one).rows[0].model_dump_json()
        start, split = len(_RANK_PREFIX), text.rindex(_PAGE_FIELDS)
        if not text.startswith(_RANK_PREFIX):
            raise AssertionError(f"a leaderboard row no longer starts with {_RANK_PREFIX}")
        parts = memo[key] = (text[start:split], text[split + len(_PAGE_FIELDS) :])
    body, tail = parts
    er = planned.er.get(row.submission_id)
    tie = planned.ties.get(row.submission_id)
    tied_with = tie.rank_above if tie is not None and tie.tied else None
    return (
        f'{{"rank":{row.rank},{body}"effective_robustness":'
        f"{'null' if er is None else er.model_dump_json()},"
        f'"tied_with":{"null" if tied_with is None else tied_with},'
        f'"tie":{"null" if tie is None else tie.model_dump_json()},{tail}'
    )


def plan(
    session: Session,
    name: str,
    query: lb.LeaderboardQuery,
    *,
    viewer: User | None,
    settings: Settings | None,
    effective_robustness: bool,
    version: tuple[int | None, int] | None = None,
) -> Plan:
    """The rows of a page with their tie marks and ER cells, before any public model is built:
    the web page renders each row's cells once per snapshot from it (``api.web.leaderboard_table``)
    as the JSON path serialises them once. ``version``: the board counter when the caller read
    it already in this transaction. Raises like :func:`leaderboard`."""
    bench, version = board_index.benchmark_named(session, name, version)
    if query.sort not in lb.SORT_COLUMNS:  # a column's label (ACR, r = 0.5): its key
        query = replace(query, sort=lb.resolve_sort(query.sort, lb.benchmark_sort_keys(bench)))
    ties = settings is not None and comparisons.terms_key(query.sort) is not None
    above: lb.LeaderboardRow | None = None
    if ties and query.offset > 0:  # with the entry just above the page's first row
        wider = replace(query, offset=query.offset - 1, limit=query.limit + 1)
        found = lb.leaderboard(session, bench, wider, viewer=viewer, version=version)
        page = replace(found, query=query, rows=found.rows[1:])
        above = found.rows[0] if found.rows else None
    else:
        page = lb.leaderboard(session, bench, query, viewer=viewer, version=version)
    marks = {}
    if ties and page.rows and settings is not None:
        marks = _tie_marks(session, page, above, settings)
    er = _er_cells(session, page, viewer) if effective_robustness else {}
    return Plan(page=page, ties=marks, er=er)


def _tie_marks(
    session: Session,
    page: lb.LeaderboardPage,
    above: lb.LeaderboardRow | None,
    settings: Settings,
) -> dict[int, TiePublic]:
    """Each row's paired test against the row ranked just above it. Entries' stored data and
    the tests of adjacent pairs are memoised with the board snapshot (both change only with a
    committed change of the board, which replaces the snapshot)."""
    sort = page.query.sort
    key = comparisons.terms_key(sort) or "acr"
    chain = ([above] if above is not None else []) + list(page.rows)
    data = _entries(session, page, [row.submission_id for row in chain], settings)
    metric = comparisons.metric_name(key)
    out = {}
    for upper, lower in itertools.pairwise(chain):
        test = _pair_test(page.memo, sort, data[upper.submission_id], data[lower.submission_id])
        if test is not None:
            tied = not test.significant(comparisons.ALPHA_TIE)
            public = PairedTestPublic.of(metric, test, alpha=comparisons.ALPHA_TIE)
            out[lower.submission_id] = TiePublic(rank_above=upper.rank, tied=tied, test=public)
    return out


def _entries(
    session: Session, page: lb.LeaderboardPage, ids: list[int], settings: Settings
) -> dict[int, comparisons.Entry]:
    sort_stage = comparisons.stage_of(comparisons.terms_key(page.query.sort) or "")
    stages = [sort_stage.name] if sort_stage is not None else []
    memo_key = ("entry", tuple(stages))
    known: dict[int, comparisons.Entry] = page.memo.setdefault(memo_key, {})
    missing = [i for i in ids if i not in known]
    if missing:
        known.update(
            comparisons.entries_on(
                session, page.benchmark, missing, settings=settings, stages=stages
            )
        )
    return {i: known[i] for i in ids}


def _pair_test(
    memo: dict[Any, Any], sort: str, upper: comparisons.Entry, lower: comparisons.Entry
) -> Any:
    """The paired test of two entries on ``sort``'s figure (None without per-image data)."""
    key = ("tie", sort, upper.submission_id, lower.submission_id)
    if key not in memo:
        try:
            memo[key] = comparisons.paired_test(upper, lower, comparisons.terms_key(sort) or "")
        except RecordsError:
            memo[key] = None
    return memo[key]


def _er_cells(
    session: Session, page: lb.LeaderboardPage, viewer: User | None
) -> dict[int, ERCellPublic]:
    """Each row's effective robustness on the benchmark aggregate (an OOD benchmark only).

    Not a sort key: the value depends on the whole visible board (and on the viewer), so it
    cannot be indexed; the analysis endpoint lists entries by it instead.
    """
    from api.services.analysis import aggregate_er

    cells = aggregate_er(session, page.benchmark.name, viewer=viewer, version=page.version)
    return {
        row.submission_id: ERCellPublic(
            value=cell.value, low=cell.low, high=cell.high, sigma=cell.sigma, n=cell.n
        )
        for row in page.rows
        if (cell := cells.get(row.submission_id)) is not None
    }
