"""Ranked leaderboard queries and per-submission results: the one read path for REST and web.

A page is one indexed query over ``leaderboard_entries`` joined with ``submissions`` (and, to sort
by a stage's figure, that figure's ``metric_values`` row through the (benchmark, key, value)
index), plus one count query and one query loading the page's rows with their figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import Select, and_, func, select
from sqlalchemy.orm import Session, aliased, contains_eager

from models.entities import (
    Benchmark,
    LeaderboardEntry,
    MetricValue,
    StageResult,
    Submission,
    User,
)
from models.errors import IntakeError, NotFoundError
from models.stages import registry
from models.stages.base import MetricSpec
from models.stages.certification import TestSetResult
from models.stages.pd_robustness import RobustnessResult
from models.states import SubmissionState
from models.submissions import visibility_filter

#: Sort keys that are submission columns rather than stage metrics.
SUBMISSION_SORTS: dict[str, Any] = {
    "sigma": Submission.sigma,
    "submitted": Submission.created_at,
    "finished": LeaderboardEntry.finished_at,
    "model_name": Submission.model_name,
}
#: Their labels (the leaderboard's column headers).
SUBMISSION_LABELS = {
    "sigma": "σ",
    "submitted": "Submitted",
    "finished": "Finished",
    "model_name": "Model",
}


def metric_directions() -> dict[str, bool]:
    """Every metric key of a registered stage → whether higher is better."""
    return registry.metric_keys()


def sort_keys() -> dict[str, bool]:
    """Every sort key of any benchmark → higher is better (stage metrics, submission columns)."""
    keys = dict(metric_directions())
    keys.update(dict.fromkeys(SUBMISSION_SORTS, True))
    return keys


#: Sort keys of any benchmark (at import time; plug-in stages registered by then included).
SORT_COLUMNS = sort_keys()
HIGHER_IS_BETTER = dict(SORT_COLUMNS)


def benchmark_metric_specs(benchmark: Benchmark) -> list[MetricSpec]:
    """Every figure the benchmark's stages store, in registry order: its leaderboard columns and
    its REST-only figures. Each key is a field of a leaderboard row's ``metrics`` and a sort
    key; ``label`` is the column header the web page shows for it."""
    stages = benchmark.stages or {}
    specs: list[MetricSpec] = []
    for stage in registry.all_stages():
        protocol = stages.get(stage.name)
        if stage.protocol_model is not None and protocol is None:
            continue
        specs += stage.metric_specs(
            protocol, test_sets=len(benchmark.test_sets), bands=list(benchmark.bands)
        )
    return specs


def benchmark_sort_keys(benchmark: Benchmark) -> dict[str, str]:
    """The sort keys of one benchmark → their labels: its figures, then the submission
    columns (σ, submission and finish times, model name)."""
    keys = {spec.key: spec.label for spec in benchmark_metric_specs(benchmark)}
    keys.update(SUBMISSION_LABELS)
    return keys


def check_sort(benchmark: Benchmark, sort: str) -> None:
    """Refuse a sort key the benchmark does not have (an empty ordering would look like a
    ranking). Raises IntakeError (422) naming the benchmark's keys."""
    keys = benchmark_sort_keys(benchmark)
    if sort not in keys:
        raise IntakeError(
            f"sort={sort!r} is not a sort key of benchmark {benchmark.name!r}; valid keys: "
            f"{', '.join(keys)}",
            code="invalid_sort",
        )


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
    only for their owner and admins). Raises IntakeError for a sort key the benchmark lacks.

    Three small queries: the filtered count, the ids of the page (walking a (benchmark, metric)
    index, so the first pages touch only ~``limit`` rows), then the full rows of those ids with
    their owner and artifact (manifest) in one join.
    """
    check_sort(benchmark, query.sort)
    total = session.scalar(_filtered(benchmark, query, viewer, func.count())) or 0
    ids_query = _filtered(benchmark, query, viewer, LeaderboardEntry.submission_id)
    column = SUBMISSION_SORTS.get(query.sort)
    if column is None:
        value = aliased(MetricValue)
        ids_query = ids_query.outerjoin(
            value,
            and_(
                value.submission_id == LeaderboardEntry.submission_id,
                value.benchmark_id == benchmark.id,
                value.key == query.sort,
            ),
        )
        column = value.value
    ordering = column.desc() if query.order == "desc" else column.asc()
    ids = list(
        session.scalars(
            ids_query.order_by(ordering.nulls_last(), LeaderboardEntry.submission_id.asc())
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


def stage_results(
    session: Session, submission: Submission, stage: str | None = None
) -> list[StageResult]:
    """Stored stage results of a submission (optionally of one stage), by stage and unit."""
    query = select(StageResult).where(StageResult.submission_id == submission.id)
    if stage is not None:
        query = query.where(StageResult.stage == stage)
    return list(session.scalars(query.order_by(StageResult.stage, StageResult.id)))


def results_of(session: Session, submission: Submission) -> list[TestSetResult]:
    """Per-test-set certification results of a submission, in the benchmark's test-set order."""
    rows = {r.unit: r for r in stage_results(session, submission, "certification")}
    return [
        TestSetResult.of(rows[ts.name], ts)
        for ts in submission.benchmark.test_sets
        if ts.name in rows
    ]


def robustness_of(session: Session, submission: Submission) -> RobustnessResult | None:
    """The base-classifier robustness result (None before it finishes or without that stage)."""
    rows = stage_results(session, submission, "pd_robustness")
    return RobustnessResult.of(rows[0]) if rows else None


def entry_of(session: Session, submission: Submission) -> LeaderboardEntry | None:
    """The leaderboard summary of a finished submission (None before it finishes)."""
    return session.get(LeaderboardEntry, submission.id)


def result_for(session: Session, submission: Submission, test_set: str) -> TestSetResult:
    """The certification result of one named test set. Raises NotFoundError."""
    for result in results_of(session, submission):
        if result.test_set.name == test_set:
            return result
    raise NotFoundError(f"submission {submission.id} has no result for test set {test_set!r}")


def certification_results(session: Session, submission_id: int) -> list[TestSetResult]:
    """``results_of`` by submission id."""
    submission = session.get(Submission, submission_id)
    return [] if submission is None else results_of(session, submission)


def robustness_result(session: Session, submission_id: int) -> RobustnessResult | None:
    """``robustness_of`` by submission id."""
    submission = session.get(Submission, submission_id)
    return None if submission is None else robustness_of(session, submission)
