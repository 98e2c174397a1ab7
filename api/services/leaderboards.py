"""Benchmarks, datasets, leaderboards and results: the read side of the service."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.schemas import (
    HUB_URL,
    BenchmarkPublic,
    DatasetPublic,
    FacetsPublic,
    LeaderboardPublic,
    Metrics,
    ResultsPublic,
    RobustnessPublic,
    SeedPublic,
    StageResultPublic,
    TestSetResultPublic,
)
from models import leaderboard as lb
from models import run_seeds, storage
from models.catalog import get_benchmark, list_benchmarks
from models.entities import LeaderboardEntry, Submission, User
from models.errors import NotFoundError
from models.settings import Settings
from models.states import SubmissionState
from models.submissions import get_visible, visibility_filter

RECORDS_URL = "/api/v1/results/{submission_id}/records/{test_set}"


def benchmarks(session: Session, *, viewer: User | None) -> list[BenchmarkPublic]:
    """Every benchmark with its test sets and the number of entries the viewer can see."""
    counts = dict(
        session.execute(
            select(LeaderboardEntry.benchmark_id, func.count())
            .join(Submission, Submission.id == LeaderboardEntry.submission_id)
            .where(Submission.state == SubmissionState.FINISHED, visibility_filter(viewer))
            .group_by(LeaderboardEntry.benchmark_id)
        ).all()
    )
    return [BenchmarkPublic.of(b, entries=counts.get(b.id, 0)) for b in list_benchmarks(session)]


def benchmark(session: Session, name: str, *, viewer: User | None) -> BenchmarkPublic:
    found = get_benchmark(session, name)
    entries = session.scalar(
        select(func.count())
        .select_from(LeaderboardEntry)
        .join(Submission, Submission.id == LeaderboardEntry.submission_id)
        .where(
            LeaderboardEntry.benchmark_id == found.id,
            Submission.state == SubmissionState.FINISHED,
            visibility_filter(viewer),
        )
    )
    return BenchmarkPublic.of(found, entries=entries or 0)


def datasets(session: Session) -> list[DatasetPublic]:
    """Published dataset repos used by the benchmarks, with Hub links and configs."""
    by_repo: dict[str, tuple[set[str], list[str]]] = {}
    for bench in list_benchmarks(session):
        for test_set in bench.test_sets:
            names, configs = by_repo.setdefault(test_set.dataset_repo, (set(), []))
            names.add(bench.name)
            if test_set.config and test_set.config not in configs:
                configs.append(test_set.config)
    out = []
    for repo, (names, configs) in sorted(by_repo.items()):
        example = configs[0] if configs else None
        call = (
            f'load_dataset("{repo}", "{example}", split="test")'
            if example
            else (f'load_dataset("{repo}", split="test")')
        )
        out.append(
            DatasetPublic(
                repo=repo,
                hub_url=HUB_URL.format(repo=repo),
                benchmarks=sorted(names),
                configs=configs,
                load_example=f"from datasets import load_dataset; ds = {call}",
            )
        )
    return out


def facets(session: Session, name: str, *, viewer: User | None) -> FacetsPublic:
    """Distinct architectures, venues and σ among the finished entries ``viewer`` can see."""
    found = get_benchmark(session, name)
    visible = (
        select(Submission.architecture, Submission.venue, Submission.sigma)
        .join(LeaderboardEntry, LeaderboardEntry.submission_id == Submission.id)
        .where(
            LeaderboardEntry.benchmark_id == found.id,
            Submission.state == SubmissionState.FINISHED,
            visibility_filter(viewer),
        )
        .distinct()
    )
    rows = session.execute(visible).all()
    return FacetsPublic(
        architectures=sorted({r.architecture for r in rows}),
        venues=sorted({r.venue for r in rows if r.venue}),
        sigmas=sorted({r.sigma for r in rows}),
    )


def leaderboard(
    session: Session, name: str, query: lb.LeaderboardQuery, *, viewer: User | None
) -> LeaderboardPublic:
    page = lb.leaderboard(session, get_benchmark(session, name), query, viewer=viewer)
    return LeaderboardPublic.of(page)


def results(session: Session, submission_id: int, *, viewer: User | None) -> ResultsPublic:
    """Per-test-set results (and the summary once finished) of a submission the viewer may see,
    with its base-classifier robustness where the benchmark measures it."""
    submission = get_visible(session, submission_id, viewer=viewer)
    seed = SeedPublic.of(run_seeds.view(session, submission))
    if not run_seeds.is_revealed(submission.state):
        # Results are stored just before the run is marked finished and carry its seed: none
        # is served until the run has ended (commit-reveal).
        return ResultsPublic(
            submission_id=submission.id,
            benchmark=submission.benchmark.name,
            model_name=submission.model_name,
            state=submission.state,
            protocol_version=submission.protocol_version,
            manifest=dict(submission.artifact.manifest),
            summary=None,
            results=[],
            seed=seed,
        )
    entry = lb.entry_of(session, submission)
    robustness = lb.robustness_of(session, submission)
    return ResultsPublic(
        submission_id=submission.id,
        benchmark=submission.benchmark.name,
        model_name=submission.model_name,
        state=submission.state,
        protocol_version=submission.protocol_version,
        manifest=dict(submission.artifact.manifest),
        summary=Metrics.of(entry) if entry is not None else None,
        results=[
            TestSetResultPublic.of(
                r,
                records_url=RECORDS_URL.format(
                    submission_id=submission.id, test_set=r.test_set.name
                ),
            )
            for r in lb.results_of(session, submission)
        ],
        robustness=RobustnessPublic.of(robustness) if robustness is not None else None,
        stages=[StageResultPublic.of(row) for row in lb.stage_results(session, submission)],
        seed=seed,
    )


def records_file(
    session: Session, submission_id: int, test_set: str, *, viewer: User | None, settings: Settings
) -> Path:
    """Path of the per-image records parquet of one test set. Raises NotFoundError.

    Merged records carry the run's seed in their metadata: they are served only once the run
    has ended (commit-reveal); shard files are never served.
    """
    submission = get_visible(session, submission_id, viewer=viewer)
    if not run_seeds.is_revealed(submission.state):
        raise NotFoundError(
            f"submission {submission_id} is {submission.state}: its records are served once "
            "the run has ended"
        )
    result = lb.result_for(session, submission, test_set)
    path = storage.resolve(settings.artifacts_dir, result.records_path)
    if not path.is_file():
        raise NotFoundError(
            f"the records file of submission {submission_id} / {test_set!r} is missing on disk"
        )
    return path
