"""Benchmarks, datasets, leaderboards and results: the read side of the service."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.data_sources import DataSourcePublic
from api.schemas.benchmark import BenchmarkPublic, BenchmarkSummary, DatasetPublic, TestSetPublic
from api.schemas.comparison import (
    ComparedEntry,
    ComparisonPublic,
    PairComparisonPublic,
    PairedTestPublic,
)
from api.schemas.leaderboard import (
    FacetsPublic,
    Metrics,
)
from api.schemas.progress import EstimatePublic
from api.schemas.result import (
    PaBandPublic,
    ResultsPublic,
    RobustnessPublic,
    StageResultPublic,
    TestSetResultPublic,
)
from api.schemas.submission import SeedPublic
from api.schemas.zoo import WeightsLinkPublic
from certbench.errors import RecordsError
from models.benchmarks.availability import availability_by_id, benchmark_availability, sources_of
from models.boards import comparisons, snapshots
from models.boards import leaderboard as lb
from models.catalog.benchmarks import get_benchmark, list_benchmarks
from models.core.errors import IntakeError, NotFoundError
from models.core.settings import Settings
from models.db import board_version
from models.db.entities import Benchmark, LeaderboardEntry, Submission, User
from models.db.states import SubmissionState
from models.runs import estimates
from models.submissions import run_seeds, storage
from models.submissions.queries import get_visible, visibility_filter

RECORDS_URL = "/api/v1/results/{submission_id}/records/{test_set}"


#: Public shapes of the benchmarks (entries left at 0) by id, with the version they were built
#: from: a definition changes only through ``upsert_benchmark``, which moves its sha256 and
#: ``updated_at``, so a page of hundreds of test sets is built once per process, not per request.
_SHAPES: dict[int, tuple[tuple[Any, ...], BenchmarkPublic, BenchmarkSummary]] = {}


def _shapes(session: Session) -> list[tuple[int, str, BenchmarkPublic, BenchmarkSummary]]:
    """(id, definition sha256, full shape, list shape) of every benchmark, by name, from the
    cache when current."""
    rows = session.execute(
        select(
            Benchmark.id,
            Benchmark.definition_sha256,
            Benchmark.definition_version,
            Benchmark.updated_at,
        ).order_by(Benchmark.name)
    ).all()
    out = []
    for benchmark_id, sha256, definition_version, updated_at in rows:
        version = (sha256, definition_version, updated_at)
        cached = _SHAPES.get(benchmark_id)
        if cached is None or cached[0] != version:
            full = BenchmarkPublic.of(session.get_one(Benchmark, benchmark_id), entries=0)
            cached = (version, full, BenchmarkSummary.of(full))
            _SHAPES[benchmark_id] = cached
        out.append((benchmark_id, sha256, cached[1], cached[2]))
    return out


def _data_fields(
    session: Session, benchmark_id: int, sha256: str, settings: Settings | None
) -> dict[str, Any]:
    """``data_available``/``data_hint`` for a public shape (empty where nothing is checked)."""
    if settings is None or not settings.require_local_data:
        return {}
    found = availability_by_id(
        benchmark_id,
        sha256,
        settings,
        lambda: sources_of(session.get_one(Benchmark, benchmark_id)),
    )
    return {
        "data_available": found.available,
        "data_hint": found.hint,
        "data_command": found.command,
    }


def data_fields(benchmark: Benchmark, settings: Settings | None) -> dict[str, Any]:
    """``data_available``/``data_hint`` of a loaded benchmark (empty where nothing is checked)."""
    if settings is None or not settings.require_local_data:
        return {}
    found = benchmark_availability(benchmark, settings)
    return {
        "data_available": found.available,
        "data_hint": found.hint,
        "data_command": found.command,
    }


def _entry_counts(session: Session, viewer: User | None) -> dict[int, int]:
    return dict(
        session.execute(
            select(LeaderboardEntry.benchmark_id, func.count())
            .join(Submission, Submission.id == LeaderboardEntry.submission_id)
            .where(Submission.state == SubmissionState.FINISHED, visibility_filter(viewer))
            .group_by(LeaderboardEntry.benchmark_id)
        ).all()
    )


def benchmarks(
    session: Session, *, viewer: User | None, settings: Settings | None = None
) -> list[BenchmarkPublic]:
    """Every benchmark with its test sets and the number of entries the viewer can see (and,
    given ``settings``, whether its data is on this machine)."""
    counts = _entry_counts(session, viewer)
    return [
        full.model_copy(
            update={
                "entries": counts.get(benchmark_id, 0),
                **_data_fields(session, benchmark_id, sha256, settings),
            }
        )
        for benchmark_id, sha256, full, _ in _shapes(session)
    ]


def benchmark_summaries(
    session: Session,
    *,
    viewer: User | None,
    offset: int,
    limit: int,
    settings: Settings | None = None,
) -> tuple[int, list[BenchmarkSummary]]:
    """A page of the benchmark list (brief test sets) and the total number of benchmarks."""
    counts = _entry_counts(session, viewer)
    shapes = _shapes(session)
    page = [
        summary.model_copy(
            update={
                "entries": counts.get(benchmark_id, 0),
                **_data_fields(session, benchmark_id, sha256, settings),
            }
        )
        for benchmark_id, sha256, _, summary in shapes[offset : offset + limit]
    ]
    return len(shapes), page


_SUMMARIES = TypeAdapter(list[BenchmarkSummary])


def benchmark_list_json(
    session: Session,
    *,
    viewer: User | None,
    offset: int,
    limit: int,
    settings: Settings | None = None,
) -> tuple[int, bytes]:
    """:func:`benchmark_summaries` as the JSON bytes the route answers (what FastAPI writes for
    its ``response_model``), kept while the board counter stands, per viewer class
    (``models.boards.snapshots.viewer_key``: the counts are of the entries the viewer sees) and
    page. Counting every benchmark's entries joins every entry (5-8 ms a request at 10,000
    entries, issue 35 §1); a new entry, a finished run, a moderation or a definition change
    moves the counter. Whether each benchmark's data is on this machine is looked up on every
    call (``models.benchmarks.availability`` keeps an answer 10 s) and is part of the key."""
    version = board_version.current(session)
    shapes = snapshots.derived(
        session,
        ("benchmark_shapes",),
        lambda: [(i, sha256) for i, sha256, _, _ in _shapes(session)],
        version,
    )
    data = {i: _data_fields(session, i, sha256, settings) for i, sha256 in shapes[offset:][:limit]}

    def build() -> bytes:
        counts = _entry_counts(session, viewer)
        page = [
            summary.model_copy(
                update={
                    "entries": counts.get(i, 0),
                    **(data[i] if i in data else _data_fields(session, i, sha256, settings)),
                }
            )
            for i, sha256, _, summary in _shapes(session)[offset : offset + limit]
        ]
        return _SUMMARIES.dump_json(page)

    facts = tuple((i, tuple(fields.items())) for i, fields in data.items())
    key = ("benchmark_list", snapshots.viewer_key(viewer), offset, limit, facts)
    return len(shapes), snapshots.derived(session, key, build, version)


def benchmark(
    session: Session, name: str, *, viewer: User | None, settings: Settings | None = None
) -> BenchmarkPublic:
    """One benchmark; with ``settings``, also whether its data is here and the estimated work
    of a submission to it."""
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
    public = BenchmarkPublic.of(found, entries=entries or 0)
    public = public.model_copy(update=data_fields(found, settings))
    if settings is not None:
        work = estimates.for_manifest(
            session, found, sigma=found.sigmas[0], manifest={}, settings=settings
        )
        public.estimate = EstimatePublic.of(work)
    return public


def datasets(session: Session) -> list[DatasetPublic]:
    """The data sets the benchmarks use, with configs and where this server reads them from (the
    Hub at a revision, a local folder, or generated here); Hub links and ``load_dataset`` calls
    only for those read from the Hub, since another repo name may be published nowhere."""
    by_repo: dict[str, tuple[set[str], list[str], dict[str, DataSourcePublic]]] = {}
    for bench in list_benchmarks(session):
        for test_set in bench.test_sets:
            names, configs, sources = by_repo.setdefault(test_set.dataset_repo, (set(), [], {}))
            names.add(bench.name)
            if test_set.config and test_set.config not in configs:
                configs.append(test_set.config)
            source = TestSetPublic.of(test_set).source
            sources.setdefault(source.label, source)
    out = []
    for repo, (names, configs, sources) in sorted(by_repo.items()):
        hub = next((s for s in sources.values() if s.kind == "hub"), None)
        out.append(
            DatasetPublic(
                repo=repo,
                hub_url=hub.hub_url if hub else None,
                benchmarks=sorted(names),
                configs=configs,
                load_example=_load_example(repo, configs[0] if configs else None) if hub else None,
                sources=list(sources.values()),
            )
        )
    return out


def _load_example(repo: str, config: str | None) -> str:
    """The ``datasets`` call that loads one config of a Hub repo's test split."""
    args = f'"{repo}", "{config}"' if config else f'"{repo}"'
    return f'from datasets import load_dataset; ds = load_dataset({args}, split="test")'


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


def compare(
    session: Session,
    name: str,
    ids: list[int],
    *,
    radii: list[float],
    viewer: User | None,
    settings: Settings,
) -> ComparisonPublic:
    """Paired tests between every pair of the given entries of one benchmark (another stage's
    figure measured on other images in one of them, after its protocol changed, is left out).

    Raises NotFoundError (an entry the viewer cannot see, or not on this benchmark),
    IntakeError (fewer than 2 entries, an unfinished one, different images, records missing).
    """
    bench = get_benchmark(session, name)
    if len(set(ids)) < 2:
        raise IntakeError(
            f"ids={ids}: compare needs at least 2 different entries, e.g. ?ids=3&ids=7",
            code="invalid_request",
        )
    submissions = [get_visible(session, i, viewer=viewer) for i in dict.fromkeys(ids)]
    for submission in submissions:
        if submission.benchmark_id != bench.id:
            raise NotFoundError(f"submission {submission.id} is not an entry of {name!r}")
        if lb.entry_of(session, submission) is None:
            raise IntakeError(
                f"submission {submission.id} is {submission.state}, not a finished entry: only "
                "finished entries can be compared",
                code="invalid_request",
            )
    found = comparisons.entries(session, submissions, settings=settings)
    data = [found[s.id] for s in submissions]
    keys = comparisons.comparison_keys(data, radii)
    pairs = []
    for i, a in enumerate(data):
        for b in data[i + 1 :]:
            tests = []
            for key in keys:
                try:
                    test = comparisons.paired_test(a, b, key)
                except RecordsError as err:
                    if comparisons.stage_of(key) is not None:
                        continue  # that stage's protocol changed between the entries
                    raise IntakeError(
                        f"submissions {a.submission_id} and {b.submission_id} cannot be "
                        f"compared: {err}",
                        code="invalid_request",
                    ) from err
                if test is None:
                    raise NotFoundError(
                        f"the per-image records of submission {a.submission_id} or "
                        f"{b.submission_id} are missing on this server"
                    )
                metric = comparisons.metric_name(key)
                tests.append(PairedTestPublic.of(metric, test, alpha=comparisons.ALPHA_TIE))
            pairs.append(PairComparisonPublic(a=a.submission_id, b=b.submission_id, tests=tests))
    return ComparisonPublic(
        benchmark=name,
        alpha=comparisons.ALPHA_TIE,
        entries=[
            ComparedEntry(submission_id=s.id, model_name=s.model_name, sigma=s.sigma)
            for s in submissions
        ],
        pairs=pairs,
    )


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
    per_set = lb.results_of(session, submission)
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
            for r in per_set
        ],
        robustness=RobustnessPublic.of(robustness) if robustness is not None else None,
        stages=[StageResultPublic.of(row) for row in lb.stage_results(session, submission)],
        seed=seed,
        weights=WeightsLinkPublic.of(submission),
        pa_band=pa_band([r.count for r in per_set]),
    )


def pa_band(counts: list[int]) -> PaBandPublic | None:
    """The entry's p_A band from its test sets' image counts (``mean_pa_band``)."""
    from certbench.stats import LEVEL, mean_pa_band

    if not counts or min(counts) < 1:
        return None
    half_width, method = mean_pa_band(counts, LEVEL)
    return PaBandPublic(half_width=half_width, level=LEVEL, method=method, test_sets=len(counts))


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


#: Media types of the files a stage result may list under ``summary["files"]`` (PNG only: an SVG
#: or HTML file served from this origin could run script).
STAGE_FILE_TYPES = {".png": "image/png"}


def stage_file(
    session: Session,
    submission_id: int,
    stage: str,
    name: str,
    *,
    viewer: User | None,
    settings: Settings,
) -> tuple[Path, str]:
    """(path, media type) of a figure a stage stored with its results and listed in a unit's
    ``summary["files"]`` (name → path relative to the artifacts folder, e.g. the weather
    attack's example panels), for a FINISHED submission the viewer may see.

    Only listed names are served, never a path from the request, and only under the
    submission's own records folder. Raises NotFoundError otherwise (the same answer for a
    private submission of someone else, as everywhere).
    """
    submission = get_visible(session, submission_id, viewer=viewer)
    media_type = STAGE_FILE_TYPES.get(PurePosixPath(name).suffix.lower())
    missing = NotFoundError(f"submission {submission_id} has no {stage} file {name!r}")
    if submission.state != SubmissionState.FINISHED or media_type is None:
        raise missing
    own = storage.resolve(settings.artifacts_dir, storage.submission_records_dir(submission.id))
    for row in lb.stage_results(session, submission, stage):
        files = row.summary.get("files")
        relpath = files.get(name) if isinstance(files, dict) else None
        if not isinstance(relpath, str):
            continue
        path = storage.resolve(settings.artifacts_dir, relpath)
        if not path.is_relative_to(own):
            continue
        if not path.is_file():
            raise NotFoundError(
                f"the {stage} file {name!r} of submission {submission_id} is missing on disk"
            )
        return path, media_type
    raise missing


def stage_records_file(
    session: Session,
    submission_id: int,
    stage: str,
    unit: str,
    *,
    viewer: User | None,
    settings: Settings,
) -> Path | None:
    """Path of a stage unit's merged per-image records (e.g. the Fourier sensitivity map's, for
    the noise floor of a difference map), or None when it is absent on this server. Served only
    for an ended run the viewer may see (the records carry the revealed seed)."""
    submission = get_visible(session, submission_id, viewer=viewer)
    if not run_seeds.is_revealed(submission.state):
        return None
    for row in lb.stage_results(session, submission, stage):
        if row.unit == unit and row.records_path:
            path = storage.resolve(settings.artifacts_dir, row.records_path)
            return path if path.is_file() else None
    return None
