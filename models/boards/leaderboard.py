"""Ranked leaderboard queries and per-submission results: the one read path for REST and web.

A page comes from the process's in-memory snapshot of its board (``models.boards.snapshots``), kept
current by the board counter (``models.db.board_version``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from models.boards import snapshots as board_index
from models.core.errors import IntakeError, NotFoundError
from models.db.entities import Benchmark, LeaderboardEntry, StageResult, Submission, User
from models.stages import registry
from models.stages.base import MetricSpec
from models.stages.certification.stage import TestSetResult
from models.stages.pd_robustness.stage import RobustnessResult

#: Sort keys that are submission columns rather than stage metrics.
SUBMISSION_SORTS: dict[str, str] = board_index.COLUMN_SORTS
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


def resolve_sort(sort: str, keys: dict[str, str]) -> str:
    """The sort key ``sort`` names among ``keys`` (key → label): the key itself
    (``cert_acc_050``) or the label the page shows (``ACR``, ``mACR``, ``r = 0.5``, ``σ``), case
    and spaces ignored; ``acr`` names the ACR column whatever the benchmark calls it (issue 34
    §7: the demo board's column reads "ACR" but ``?sort=acr`` answered 422). An unknown name
    comes back unchanged (``check_sort`` refuses it, naming the keys)."""
    if sort in keys:
        return sort

    def norm(text: str) -> str:
        return "".join(text.split()).casefold()

    wanted = norm(sort)
    for key, label in keys.items():
        if norm(key) == wanted or norm(label) in (wanted, "m" + wanted):
            return key
    return sort


def check_sort(benchmark: Benchmark, sort: str, keys: dict[str, str] | None = None) -> None:
    """Refuse a sort key the benchmark does not have (an empty ordering would look like a
    ranking). Raises IntakeError (422) naming the benchmark's keys (``keys``: already known)."""
    keys = benchmark_sort_keys(benchmark) if keys is None else keys
    if sort not in keys:
        labels = ", ".join(f"{label} = {key}" for key, label in keys.items() if label != key)
        raise IntakeError(
            f"sort={sort!r} is not a sort key of benchmark {benchmark.name!r} (a key, or the "
            f"label of a column in any case: {labels}); valid keys: {', '.join(keys)}",
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
    denoiser: str | None = None


@dataclass(frozen=True)
class LeaderboardRow:
    """One ranked entry as a page shows it: its rank within the filtered, sorted list, its
    submission's columns and its figures and card from the read model (``leaderboard_rows``).

    Plain values read by one Core ``select``, not ORM objects: a page builds no per-figure
    objects and triggers no lazy loads.
    """

    rank: int
    submission_id: int
    model_name: str
    owner: str
    architecture: str
    sigma: float
    extra_data: bool
    venue: str | None
    is_baseline: bool
    flagged: bool
    flag_reason: str | None
    submitted_at: datetime
    finished_at: datetime
    protocol_version: str
    test_sets: int
    count: int
    seconds: float
    figures: dict[str, float | None]
    card: dict[str, Any]
    weights_license: str | None
    """The licence when anyone may download the weights (``models.submissions.zoo``), else None."""


@dataclass(frozen=True)
class LeaderboardPage:
    benchmark: Benchmark
    query: LeaderboardQuery
    total: int
    rows: list[LeaderboardRow] = field(default_factory=list)
    memo: dict[Any, Any] = field(default_factory=dict, repr=False)
    """The board snapshot's memo (``models.boards.snapshots.Board.memo``): derived data valid while
    the board is unchanged."""
    version: tuple[int | None, int] | None = None
    """The board counter (epoch, version) the page was read at."""
    sort_label: str = ""
    """The label of the column ``query.sort`` (the key used) sorts by."""


def leaderboard(
    session: Session,
    benchmark: Benchmark,
    query: LeaderboardQuery,
    *,
    viewer: User | None,
    version: tuple[int | None, int] | None = None,
) -> LeaderboardPage:
    """A page of the benchmark's leaderboard as ``viewer`` may see it (hidden and private entries
    only for their owner and admins). Raises IntakeError for a sort key the benchmark lacks.

    Served from this process's snapshot of the board (``models.boards.snapshots``): one primary-key
    read of the board counter, then a mask, an index and a slice in memory; the snapshot is
    rebuilt (one ``select``) when a committed change moved the counter.
    """
    board = board_index.board(session, benchmark, version)
    keys = board.memo.get("sort_keys")
    if keys is None:  # a definition change moves the board counter: a new snapshot
        keys = board.memo["sort_keys"] = benchmark_sort_keys(benchmark)
    query = replace(query, sort=resolve_sort(query.sort, keys))
    check_sort(benchmark, query.sort, keys)
    filters = board_index.Filters(
        protocol_version=query.protocol_version or benchmark.protocol_version,
        sigma=query.sigma,
        architecture=query.architecture,
        extra_data=query.extra_data,
        venue=query.venue,
        search=query.search,
        flagged=query.flagged,
        baseline=query.baseline,
        denoiser=query.denoiser,
    )
    found = board.page(
        filters, viewer, sort=query.sort, order=query.order, offset=query.offset,
        limit=query.limit,
    )  # fmt: skip
    rows = [LeaderboardRow(rank=query.offset + i + 1, **row) for i, row in enumerate(found.rows)]
    return LeaderboardPage(
        benchmark=benchmark, query=query, total=found.total, rows=rows, memo=found.memo,
        version=found.version, sort_label=keys[query.sort],
    )  # fmt: skip


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
