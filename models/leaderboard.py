"""Ranked leaderboard queries and per-submission results: the one read path for REST and web.

A page is one indexed query over ``leaderboard_entries`` joined with ``submissions`` and ``users``
(sorting by any metric column, filters, search, offset paging) plus one count query.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session, contains_eager

from models.entities import (
    Benchmark,
    LeaderboardEntry,
    Result,
    RobustnessResult,
    Submission,
    TestSet,
    User,
)
from models.errors import NotFoundError
from models.states import SubmissionState
from models.submissions import visibility_filter

#: Sort keys accepted by the API → columns. All metrics are higher-is-better except abstain_rate.
SORT_COLUMNS = {
    "macr": LeaderboardEntry.macr,
    "acr": LeaderboardEntry.macr,
    "cert_acc_000": LeaderboardEntry.cert_acc_000,
    "cert_acc_025": LeaderboardEntry.cert_acc_025,
    "cert_acc_050": LeaderboardEntry.cert_acc_050,
    "cert_acc_075": LeaderboardEntry.cert_acc_075,
    "cert_acc_100": LeaderboardEntry.cert_acc_100,
    "clean_accuracy": LeaderboardEntry.clean_accuracy,
    "abstain_rate": LeaderboardEntry.abstain_rate,
    "pa_median": LeaderboardEntry.pa_median,
    "band_low": LeaderboardEntry.band_low,
    "band_mid": LeaderboardEntry.band_mid,
    "band_high": LeaderboardEntry.band_high,
    "base_accuracy": LeaderboardEntry.base_accuracy,
    "linf_acc_8": LeaderboardEntry.linf_acc_8,
    "linf_acc_16": LeaderboardEntry.linf_acc_16,
    "pd_acc_8": LeaderboardEntry.pd_acc_8,
    "pd_acc_16": LeaderboardEntry.pd_acc_16,
    "sigma": Submission.sigma,
    "submitted": Submission.created_at,
    "finished": LeaderboardEntry.finished_at,
    "model_name": Submission.model_name,
}
HIGHER_IS_BETTER = {key: key != "abstain_rate" for key in SORT_COLUMNS}


@dataclass(frozen=True)
class LeaderboardQuery:
    """Sorting, filters and paging of a leaderboard request (validated by the API schema)."""

    sort: str = "macr"
    order: Literal["asc", "desc"] = "desc"
    offset: int = 0
    limit: int = 50
    sigma: float | None = None
    architecture: str | None = None
    extra_data: bool | None = None
    venue: str | None = None
    search: str | None = None
    flagged: bool | None = None
    baseline: bool | None = None
    protocol_version: str | None = None


@dataclass(frozen=True)
class LeaderboardRow:
    """One ranked entry: its rank within the filtered, sorted list.

    ``submission.artifact`` (the manifest: authors, paper and code links) is loaded by the same
    query, so reading it costs no extra round trip.
    """

    rank: int
    entry: LeaderboardEntry
    submission: Submission
    owner: str


@dataclass(frozen=True)
class LeaderboardPage:
    benchmark: Benchmark
    query: LeaderboardQuery
    total: int
    rows: list[LeaderboardRow] = field(default_factory=list)


def _filtered(
    benchmark: Benchmark, query: LeaderboardQuery, viewer: User | None, *columns: Any
) -> Select[Any]:
    """The filtered entries, selecting only ``columns`` (narrow rows sort fast)."""
    stmt = (
        select(*columns)
        .select_from(LeaderboardEntry)
        .join(Submission, Submission.id == LeaderboardEntry.submission_id)
        .where(
            LeaderboardEntry.benchmark_id == benchmark.id,
            Submission.state == SubmissionState.FINISHED,
            LeaderboardEntry.protocol_version
            == (query.protocol_version or benchmark.protocol_version),
            visibility_filter(viewer),
        )
    )
    if query.sigma is not None:
        stmt = stmt.where(func.abs(Submission.sigma - query.sigma) < 1e-9)
    if query.architecture:
        stmt = stmt.where(Submission.architecture == query.architecture)
    if query.extra_data is not None:
        stmt = stmt.where(Submission.extra_data.is_(query.extra_data))
    if query.venue:
        stmt = stmt.where(Submission.venue == query.venue)
    if query.flagged is not None:
        stmt = stmt.where(Submission.flagged.is_(query.flagged))
    if query.baseline is not None:
        stmt = stmt.where(Submission.is_baseline.is_(query.baseline))
    if query.search:
        pattern = f"%{query.search.lower()}%"
        stmt = stmt.join(User, User.id == Submission.user_id).where(
            func.lower(Submission.model_name).like(pattern) | func.lower(User.name).like(pattern)
        )
    return stmt


def leaderboard(
    session: Session, benchmark: Benchmark, query: LeaderboardQuery, *, viewer: User | None
) -> LeaderboardPage:
    """A page of the benchmark's leaderboard as ``viewer`` may see it (hidden and private entries
    only for their owner and admins). Raises NotFoundError for an unknown sort key.

    Three small queries: the filtered count, the ids of the page (walking a (benchmark, metric)
    index, so the first pages touch only ~``limit`` rows), then the full rows of those ids with
    their owner and artifact (manifest) in one join.
    """
    column = SORT_COLUMNS.get(query.sort)
    if column is None:
        raise NotFoundError(
            f"sort={query.sort!r} is not a leaderboard column; use one of {sorted(SORT_COLUMNS)}",
            code="invalid_sort",
        )
    total = session.scalar(_filtered(benchmark, query, viewer, func.count())) or 0
    ordering = column.desc() if query.order == "desc" else column.asc()
    ids = list(
        session.scalars(
            _filtered(benchmark, query, viewer, LeaderboardEntry.submission_id)
            .order_by(ordering.nulls_last(), LeaderboardEntry.submission_id.asc())
            .offset(query.offset)
            .limit(query.limit)
        )
    )
    loaded = {
        entry.submission_id: (entry, submission, owner)
        for entry, submission, owner in session.execute(
            select(LeaderboardEntry, Submission, User.name)
            .join(Submission, Submission.id == LeaderboardEntry.submission_id)
            .join(User, User.id == Submission.user_id)
            .join(Submission.artifact)
            .options(contains_eager(Submission.artifact))
            .where(LeaderboardEntry.submission_id.in_(ids))
        ).all()
    }
    rows = [
        LeaderboardRow(rank=query.offset + i + 1, entry=e, submission=s, owner=owner)
        for i, (e, s, owner) in enumerate(loaded[sid] for sid in ids)
    ]
    return LeaderboardPage(benchmark=benchmark, query=query, total=total, rows=rows)


def results_of(session: Session, submission: Submission) -> list[Result]:
    """Per-test-set results of a submission, in the benchmark's test-set order."""
    return list(
        session.scalars(
            select(Result)
            .join(TestSet, TestSet.id == Result.test_set_id)
            .where(Result.submission_id == submission.id)
            .order_by(TestSet.position)
        )
    )


def robustness_of(session: Session, submission: Submission) -> RobustnessResult | None:
    """The base-classifier robustness result (None before it finishes or without that stage)."""
    return session.get(RobustnessResult, submission.id)


def entry_of(session: Session, submission: Submission) -> LeaderboardEntry | None:
    """The leaderboard summary of a finished submission (None before it finishes)."""
    return session.get(LeaderboardEntry, submission.id)


def result_for(session: Session, submission: Submission, test_set: str) -> Result:
    """The result of one named test set. Raises NotFoundError."""
    result = session.scalar(
        select(Result)
        .join(TestSet, TestSet.id == Result.test_set_id)
        .where(Result.submission_id == submission.id, TestSet.name == test_set)
    )
    if result is None:
        raise NotFoundError(f"submission {submission.id} has no result for test set {test_set!r}")
    return result
