"""Request and response shapes (pydantic v2), split by purpose; handlers return the Public shapes
so token hashes and file paths never leak. Built from ORM rows by the ``from_*`` constructors."""

from __future__ import annotations

import math
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.data_sources import DataSourcePublic
from api.progress_schemas import EstimatePublic, ThroughputPublic
from models.entities import (
    Benchmark,
    LeaderboardEntry,
    Role,
    StageResult,
    Submission,
    TestSet,
    User,
)
from models.leaderboard import HIGHER_IS_BETTER, LeaderboardPage, benchmark_sort_keys
from models.progress import ProgressReport
from models.run_seeds import SeedView

if TYPE_CHECKING:
    from certbench.intervals import PairedTest
from api.zoo_schemas import WeightsLinkPublic
from models.stages.base import CI_HIGH, CI_LOW
from models.stages.certification import TestSetResult
from models.stages.pd_robustness import RobustnessResult
from models.states import SubmissionState

#: Keys of a stored robustness protocol that name this deployment's files, never served.
PRIVATE_PROTOCOL_KEYS = frozenset({"folder"})


def public_protocol(protocol: dict[str, Any] | None) -> dict[str, Any] | None:
    """A robustness protocol as served: without local folders (None stays None)."""
    if protocol is None:
        return None
    return {k: v for k, v in protocol.items() if k not in PRIVATE_PROTOCOL_KEYS}


class ErrorResponse(BaseModel):
    """Every error: a stable machine-readable code and a message saying what to fix."""

    code: str = Field(examples=["not_safetensors"])
    message: str
    details: list[dict[str, Any]] | None = None


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse} for status in (400, 401, 403, 404, 409, 413, 422, 429, 503)
}


# ---- users and tokens -------------------------------------------------------------------------


class UserCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    role: Role = Role.SUBMITTER
    email: str | None = Field(default=None, max_length=254)


class UserPublic(BaseModel):
    id: int
    name: str
    role: Role
    is_active: bool
    created_at: datetime

    @classmethod
    def of(cls, user: User) -> UserPublic:
        return cls(
            id=user.id,
            name=user.name,
            role=user.role,
            is_active=user.is_active,
            created_at=user.created_at,
        )


class QuotaPublic(BaseModel):
    submissions_today: int
    submissions_per_day: int
    unsuccessful_today: int
    unsuccessful_per_day: int
    active: int
    concurrent: int
    forward_passes_today: int = Field(
        description="estimated forward passes charged to your submissions of the last 24 hours "
        "(cancelled or failed runs: the part they computed; rejected uploads and duplicates: "
        "nothing)"
    )
    forward_passes_per_day: int = Field(
        description="the daily compute quota (CERTBENCH_QUOTA_FORWARD_PASSES_PER_DAY); admins "
        "are exempt"
    )


class MePublic(UserPublic):
    quota: QuotaPublic


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: str = Field(default="", max_length=64)
    expires_in_days: int | None = Field(default=None, gt=0, le=3650)


class TokenIssued(BaseModel):
    """Returned once at creation: ``token`` is the secret and is not stored anywhere."""

    id: int
    user_id: int
    prefix: str
    label: str
    token: str
    created_at: datetime
    expires_at: datetime | None


# ---- benchmarks and datasets ------------------------------------------------------------------


class ProtocolPublic(BaseModel):
    version: str
    n0: int
    n: int
    alpha: float
    seed: int = Field(
        description=(
            "public seed for local, reproducible CLI runs; the service never uses it: every "
            "run draws its own secret seed (see a submission's `seed`)"
        )
    )


class TestSetPublic(BaseModel):
    __test__ = False

    name: str
    dataset_repo: str
    hub_url: str | None = Field(
        description="the Hub page of the data read, when this server reads it from the Hub "
        "(``source.kind`` hub); null for a local folder or data generated here"
    )
    config: str | None
    revision: str | None
    split: str
    subset_skip: int
    subset_limit: int | None
    num_images: int
    band: str | None
    attributes: dict[str, Any]
    provenance: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "what the definition pins about the data: generator, generator_version, protocol "
            "(CIFAR-F: paper or reference), generation_seed, source, source_revision, and the "
            "content hash workers check (sha256 of the config's parquet shard) or hub_commit"
        ),
    )
    source: DataSourcePublic = Field(
        description="where this server reads the images from: the Hub repo at a revision, or a "
        "local folder named by its content hash (``dataset_repo`` is the published name either "
        "way)"
    )

    @classmethod
    def of(cls, test_set: TestSet) -> TestSetPublic:
        source = DataSourcePublic.of(
            repo=test_set.dataset_repo,
            folder=test_set.dataset_folder,
            revision=test_set.revision,
            provenance=test_set.provenance or {},
            name=test_set.name,
        )
        return cls(
            name=test_set.name,
            dataset_repo=test_set.dataset_repo,
            hub_url=source.hub_url,
            config=test_set.config,
            revision=test_set.revision,
            split=test_set.split,
            subset_skip=test_set.subset_skip,
            subset_limit=test_set.subset_limit,
            num_images=test_set.num_images,
            band=test_set.band,
            attributes=dict(test_set.attributes),
            provenance=dict(test_set.provenance or {}),
            source=source,
        )


class DataAvailabilityFields(BaseModel):
    """Whether this machine holds a benchmark's data, shared by its full and summary shapes."""

    data_available: bool | None = Field(
        default=None,
        description="whether this machine holds the benchmark's data (its local folders, local "
        "copies of its Hub datasets or the `datasets` cache); submissions to a benchmark without "
        "it are refused (422 dataset_unavailable). Null where the service does not check "
        "(CERTBENCH_REQUIRE_LOCAL_DATA=false)",
    )
    data_hint: str | None = Field(
        default=None,
        description="when data_available is false: what is missing and the command that fixes "
        "it, e.g. `certbench datasets fetch cifar10`",
        examples=[
            "uoft-cs/cifar10 not on this machine: run `certbench datasets fetch cifar10` where "
            "the service runs, or point the definition's `folder` at a local copy"
        ],
    )
    data_command: str | None = Field(
        default=None,
        description="when Hub data is missing: the one command that fetches it",
        examples=["certbench datasets fetch cifar10"],
    )


class BenchmarkPublic(DataAvailabilityFields):
    name: str
    title: str
    description: str
    base_dataset: str
    num_classes: int
    sigmas: list[float]
    definition_version: int
    protocol: ProtocolPublic
    bands: dict[str, list[str]]
    test_sets: list[TestSetPublic]
    entries: int = Field(description="finished public entries on the leaderboard")
    robustness: dict[str, Any] | None = Field(
        default=None,
        description=(
            "protocol of the base-classifier robustness stage (Muthukumar et al. 2025: clean, "
            "ℓ∞ and ℓ∞ ∩ PD "
            "robust accuracy of the deterministic model, not smoothed): dataset repo/config/"
            "split, image subset (subset_skip, subset_limit, num_images), anchor bank file, k, "
            "anchor_seed, eps (list, units of 1/255), n_iter, n_target_classes, projection, "
            "weighting; null for a benchmark without the stage"
        ),
        examples=[
            {
                "repo": "uoft-cs/cifar10",
                "anchors": "cifar10_k50_s0.safetensors",
                "k": 50,
                "eps": [8, 16],
                "n_iter": 100,
                "projection": "exact",
                "weighting": "pd",
                "num_images": 500,
            }
        ],
    )
    stages: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description=(
            "protocol of every evaluation stage the benchmark runs beyond certification, by stage "
            "name (``robustness`` repeats the pd_robustness one)"
        ),
    )
    sort_keys: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "the leaderboard's sort keys → the column label the web page shows: every figure "
            "of the rows' `metrics` this benchmark stores (same names), then sigma, submitted, "
            "finished and model_name"
        ),
        examples=[{"macr": "mACR", "cert_acc_050": "r = 0.5", "sigma": "σ"}],
    )
    estimate: EstimatePublic | None = Field(
        default=None,
        description="the work of one submission, the same at every σ (no stage's cost depends "
        "on σ), estimated before an entry's preprocessing is known (a Fourier-lens pixel path "
        "counts 1 image here: see the stage's note); seconds at this fleet's measured "
        "throughput. Only in ``GET /benchmarks/{name}``",
    )

    @classmethod
    def of(cls, benchmark: Benchmark, *, entries: int) -> BenchmarkPublic:
        return cls(
            name=benchmark.name,
            title=benchmark.title,
            description=benchmark.description,
            base_dataset=benchmark.base_dataset,
            num_classes=benchmark.num_classes,
            sigmas=list(benchmark.sigmas),
            definition_version=benchmark.definition_version,
            protocol=ProtocolPublic(
                version=benchmark.protocol_version,
                n0=benchmark.n0,
                n=benchmark.n,
                alpha=benchmark.alpha,
                seed=benchmark.seed,
            ),
            bands={k: list(v) for k, v in benchmark.bands.items()},
            test_sets=[TestSetPublic.of(ts) for ts in benchmark.test_sets],
            entries=entries,
            robustness=public_protocol((benchmark.stages or {}).get("pd_robustness")),
            stages={
                name: public_protocol(row) or {} for name, row in (benchmark.stages or {}).items()
            },
            sort_keys=benchmark_sort_keys(benchmark),
        )


class TestSetBrief(BaseModel):
    """A test set as the benchmark list shows it (``GET /benchmarks/{name}`` has every field)."""

    __test__ = False

    name: str
    config: str | None
    band: str | None
    hub_url: str | None = Field(
        description="as ``TestSetPublic.hub_url``: null unless read from the Hub"
    )
    source: str = Field(description="where this server reads it from (``source.label``)")


class BenchmarkSummary(DataAvailabilityFields):
    """A benchmark as ``GET /api/v1/benchmarks`` lists it: what to submit to, without each test
    set's details (``GET /api/v1/benchmarks/{name}`` has them)."""

    name: str
    title: str
    description: str
    base_dataset: str
    num_classes: int
    sigmas: list[float]
    definition_version: int
    protocol: ProtocolPublic
    bands: dict[str, list[str]]
    entries: int = Field(description="finished public entries on the leaderboard")
    robustness: dict[str, Any] | None = Field(
        default=None,
        description="protocol of the base-classifier robustness stage (Muthukumar et al. 2025)",
    )
    test_set_count: int
    test_sets: list[TestSetBrief]

    @classmethod
    def of(cls, public: BenchmarkPublic) -> BenchmarkSummary:
        return cls(
            **public.model_dump(exclude={"test_sets"}),
            test_set_count=len(public.test_sets),
            test_sets=[
                TestSetBrief(
                    name=t.name,
                    config=t.config,
                    band=t.band,
                    hub_url=t.hub_url,
                    source=t.source.label,
                )
                for t in public.test_sets
            ],
        )


class FacetsPublic(BaseModel):
    """Distinct filter values among the entries a viewer can see (for filter dropdowns)."""

    architectures: list[str]
    venues: list[str]
    sigmas: list[float]


class DatasetPublic(BaseModel):
    """A data set the benchmarks use, its configs, and where this server reads them from (the
    Hub, a local folder, or generated here)."""

    repo: str = Field(description="the name the benchmark definitions give the data set")
    hub_url: str | None = Field(
        description="its Hugging Face Hub page when this server reads it from the Hub; null when "
        "every test set of it is a local folder or data generated here (nothing to link to)"
    )
    benchmarks: list[str]
    configs: list[str]
    load_example: str | None = Field(
        description="a ``datasets.load_dataset`` call for the Hub copy; null where ``hub_url`` is"
    )
    sources: list[DataSourcePublic] = Field(
        description="the distinct sources this server reads the repo's test sets from (a local "
        "folder, or the Hub at a revision), in the benchmarks' order"
    )


# ---- submissions ------------------------------------------------------------------------------


class SeedPublic(BaseModel):
    """The noise seed of a submission's current run (commit-reveal, ``models.run_seeds``)."""

    kind: Literal["secret", "public"] = Field(
        description=(
            "secret: drawn for this run, committed at queue time, revealed when it ends; "
            "public: the benchmark's public seed (runs from before commit-reveal)"
        )
    )
    commitment: str = Field(
        description="SHA-256 (hex) of the seed as written: `printf %s SEED | sha256sum`"
    )
    revealed: bool = Field(description="whether the run has ended and `value` is shown")
    value: str | None = Field(
        description=(
            "the seed (0x-hex for a secret seed), null until the run has finished, failed or "
            "been cancelled; `certbench certify ... --seed VALUE` reproduces the records"
        )
    )
    drawn_at: datetime | None

    @classmethod
    def of(cls, seed: SeedView | None) -> SeedPublic | None:
        if seed is None:
            return None
        return cls(
            kind=seed.kind,  # type: ignore[arg-type]
            commitment=seed.commitment,
            revealed=seed.revealed,
            value=seed.value,
            drawn_at=seed.drawn_at,
        )


class EventPublic(BaseModel):
    at: datetime
    from_state: SubmissionState | None
    to_state: SubmissionState
    reason: str | None
    message: str


class SubmissionPublic(BaseModel):
    id: int
    state: SubmissionState
    reason: str | None
    message: str
    benchmark: str
    model_name: str
    architecture: str
    sigma: float
    is_private: bool
    hidden: bool
    flagged: bool
    flag_reason: str | None
    is_baseline: bool
    extra_data: bool
    venue: str | None
    protocol_version: str
    duplicate_of: int | None = Field(
        description="the original this duplicate's results come from; null when that is "
        "another user's private or hidden entry"
    )
    attempt: int
    progress: float = Field(
        description="fraction of the estimated forward passes done, every stage weighted by its "
        "work: recorded shards plus the running shards' partial counts (1 once finished); the "
        "same figure as ``/progress``"
    )
    samples_done: int = Field(
        default=0, description="forward passes done (recorded + running shards), as progress"
    )
    samples_total: int = Field(default=0, description="estimated forward passes in all")
    throughput: ThroughputPublic | None = Field(
        default=None,
        description="measured samples/s and images/s: the running shards now, else the average "
        "of the recorded ones; null before any shard reported",
    )
    eta_seconds: float | None = Field(
        default=None,
        description="remaining estimated forward passes over the measured rate of each stage "
        "(this submission's, else this fleet's recent shards); null while a stage with work "
        "left was never measured, or once the run ended (``eta_basis`` says why)",
    )
    eta_basis: str = Field(default="", description="how eta_seconds was computed, or why null")
    estimate: EstimatePublic | None = Field(
        default=None,
        description="the work estimated from the protocol (forward passes, seconds at this "
        "fleet's throughput or null, basis); also in the 202 response",
    )
    shards_done: int
    shards_total: int
    queue_position: int | None
    weights_sha256: str
    weights_size: int
    manifest: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None
    events: list[EventPublic] | None = None
    seed: SeedPublic | None = Field(
        default=None,
        description="the run's noise seed: its commitment, and the seed once the run has ended",
    )
    weights_public: bool = Field(
        default=False, description="the submitter published the weights (model zoo)"
    )
    weights_license: str | None = Field(
        default=None, description="SPDX licence of the published weights"
    )
    weights: WeightsLinkPublic | None = Field(
        default=None,
        description="download link of the weights once anyone may download them (published, "
        "finished, public and visible); null otherwise",
    )

    @classmethod
    def of(
        cls,
        submission: Submission,
        *,
        queue_position: int | None,
        show_duplicate_of: bool,
        with_events: bool = False,
        seed: SeedView | None = None,
        report: ProgressReport | None = None,
    ) -> SubmissionPublic:
        """``show_duplicate_of``: whether the viewer may see the original's id (not when it is
        another user's private or hidden entry); ``report``: its progress (``models.progress``),
        whose fraction replaces the stored one."""
        artifact = submission.artifact
        progress: dict[str, Any] = {"progress": submission.progress}
        if report is not None:
            progress = {
                "progress": report.fraction,
                "samples_done": report.samples_done,
                "samples_total": report.samples_total,
                "throughput": ThroughputPublic.of(report.throughput),
                "eta_seconds": report.eta_seconds,
                "eta_basis": report.eta_basis,
                "estimate": EstimatePublic.of(report.estimate),
            }
        return cls(
            id=submission.id,
            state=submission.state,
            reason=submission.reason,
            message=submission.message,
            benchmark=submission.benchmark.name,
            model_name=submission.model_name,
            architecture=submission.architecture,
            sigma=submission.sigma,
            is_private=submission.is_private,
            hidden=submission.hidden,
            flagged=submission.flagged,
            flag_reason=submission.flag_reason,
            is_baseline=submission.is_baseline,
            extra_data=submission.extra_data,
            venue=submission.venue,
            protocol_version=submission.protocol_version,
            duplicate_of=submission.duplicate_of_id if show_duplicate_of else None,
            attempt=submission.attempt,
            **progress,
            shards_done=submission.shards_done,
            shards_total=submission.shards_total,
            queue_position=queue_position,
            weights_sha256=artifact.sha256,
            weights_size=artifact.size_bytes,
            manifest=dict(artifact.manifest),
            created_at=submission.created_at,
            updated_at=submission.updated_at,
            started_at=submission.started_at,
            finished_at=submission.finished_at,
            heartbeat_at=submission.heartbeat_at,
            events=[
                EventPublic(
                    at=e.at,
                    from_state=e.from_state,
                    to_state=e.to_state,
                    reason=e.reason,
                    message=e.message,
                )
                for e in submission.events
            ]
            if with_events
            else None,
            seed=SeedPublic.of(seed),
            weights_public=submission.weights_public,
            weights_license=submission.weights_license,
            weights=WeightsLinkPublic.of(submission),
        )


class SubmissionList(BaseModel):
    total: int
    offset: int
    limit: int
    items: list[SubmissionPublic]


class ModerationUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hidden: bool | None = None
    flagged: bool | None = None
    flag_reason: str | None = Field(default=None, max_length=500)
    is_baseline: bool | None = None


class RerunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fresh: bool = Field(
        default=False,
        description="drop recorded shards and results; otherwise finished shards are reused",
    )


# ---- results and leaderboards -----------------------------------------------------------------


BASE_ACCURACY_HELP = (
    "clean accuracy of the base classifier (the deterministic model, not smoothed) on the "
    "robustness stage's clean subset; null without that stage"
)
LINF_HELP = (
    "robust accuracy of the base classifier (not smoothed) under ℓ∞ APGD at ε = {eps}/255 "
    "(ε in units of 1/255); null without the robustness stage or when that ε is not attacked"
)
PD_HELP = (
    "robust accuracy of the base classifier (not smoothed) under ℓ∞ ∩ PD at ε = {eps}/255 (ε in "
    "units of 1/255): the worse of ℓ∞ APGD + lazy PD projection and PD-aware APGD "
    "(Muthukumar et al. 2025); "
    "null without the robustness stage or when that ε is not attacked"
)


class IntervalPublic(BaseModel):
    """A 95 % interval over the sampled images (``certbench.figure_intervals``)."""

    ci_low: float | None
    ci_high: float | None


class Metrics(BaseModel):
    """Means over the benchmark's test sets (mACR = mean ACR; bands as in Sun et al. 2022, ECCV),
    and the base classifier's robustness (Muthukumar et al. 2025) where the benchmark has that
    stage. Figures of other
    evaluation stages appear as further keys (their metric keys), null when not measured.

    Every figure of every stage carries its 95 % interval over the sampled images, both as
    sibling fields ``<key>_ci_low``/``<key>_ci_high`` and in ``intervals``: Clopper-Pearson for
    an accuracy of one set of images, a bootstrap over images (cluster bootstrap over images
    shared by several sets) for means, and for Fourier-lens means the Gaussian interval of
    Fridovich-Keil et al. (2022)."""

    model_config = ConfigDict(extra="allow")

    macr: float
    cert_acc_000: float
    cert_acc_025: float
    cert_acc_050: float
    cert_acc_075: float
    cert_acc_100: float
    clean_accuracy: float
    abstain_rate: float
    pa_median: float
    pa_q10: float | None
    pa_q25: float | None
    pa_q75: float | None
    pa_q90: float | None
    band_low: float | None
    band_mid: float | None
    band_high: float | None
    base_accuracy: float | None = Field(description=BASE_ACCURACY_HELP)
    linf_acc_8: float | None = Field(description=LINF_HELP.format(eps=8))
    linf_acc_16: float | None = Field(description=LINF_HELP.format(eps=16))
    pd_acc_8: float | None = Field(description=PD_HELP.format(eps=8))
    pd_acc_16: float | None = Field(description=PD_HELP.format(eps=16))
    test_sets: int
    count: int
    seconds: float
    intervals: dict[str, IntervalPublic] = Field(
        default_factory=dict,
        description=(
            "95 % interval over the sampled images of each figure of every stage (key → "
            "ci_low, ci_high): Clopper-Pearson for a proportion on one set of images (a test "
            "set, the robustness subset, one weather set), else a bootstrap over images (a "
            "cluster bootstrap when the figure averages several sets of the same images), "
            "Gaussian for Fourier-lens means; null bounds for a figure not measured. Empty for "
            "an entry aggregated before intervals (`certbench results backfill-intervals` "
            "fills it)"
        ),
    )

    @classmethod
    def of(cls, entry: LeaderboardEntry) -> Metrics:
        figures = entry.metrics
        fixed = {"test_sets": entry.test_sets, "count": entry.count, "seconds": entry.seconds}
        declared = set(cls.model_fields) - {"intervals"}
        values = {name: figures.get(name) for name in declared if name not in fixed}
        extra = {k: v for k, v in figures.items() if k not in cls.model_fields}
        intervals = {
            key.removesuffix(CI_LOW): IntervalPublic(
                ci_low=low, ci_high=figures.get(key.removesuffix(CI_LOW) + CI_HIGH)
            )
            for key, low in sorted(figures.items())
            if key.endswith(CI_LOW)
        }
        return cls(**values, **fixed, **extra, intervals=intervals)


class DifferencePublic(BaseModel):
    estimate: float
    ci_low: float
    ci_high: float
    level: float
    method: str


class PairedTestPublic(BaseModel):
    """Entry A against entry B on the same images: the difference A − B of one figure (named by
    its leaderboard key), its 95 % interval and the two-sided p-value of no difference."""

    metric: str = Field(examples=["macr", "cert_acc_050", "band_low"])
    estimate_a: float
    estimate_b: float
    difference: DifferencePublic
    p_value: float
    method: str = Field(examples=["paired cluster bootstrap", "exact mcnemar"])
    tied: bool = Field(description="the difference is not significant at level `alpha` (0.05)")

    @classmethod
    def of(cls, metric: str, test: PairedTest, *, alpha: float) -> PairedTestPublic:
        d = test.difference
        return cls(
            metric=metric,
            estimate_a=test.estimate_a,
            estimate_b=test.estimate_b,
            difference=DifferencePublic(
                estimate=d.estimate, ci_low=d.low, ci_high=d.high, level=d.level, method=d.method
            ),
            p_value=test.p_value,
            method=test.method,
            tied=not test.significant(alpha),
        )


class TiePublic(BaseModel):
    """This entry against the entry ranked just above it, on the figure the page is sorted by."""

    rank_above: int
    tied: bool = Field(description="not significantly different from the entry above (p ≥ 0.05)")
    test: PairedTestPublic


ER_HELP = (
    "effective robustness in the probit domain: Φ⁻¹(OOD accuracy) minus the fitted line at the "
    "entry's Φ⁻¹(ID accuracy), with a 95 % interval (binomial uncertainty of both accuracies and "
    "the line's standard error). Computed on read across the entries you can see; not stored "
    "and not a sort key"
)


class ERCellPublic(BaseModel):
    """An OOD entry's effective robustness on its benchmark aggregate (Fridovich-Keil et al.
    2022 §4): fitted per σ across the same-σ entries of this benchmark matched to the clean
    benchmark, ID accuracy = certified accuracy at r = 0 there. See ``/api/v1/analysis``."""

    value: float = Field(description=ER_HELP)
    low: float
    high: float
    sigma: float
    n: int = Field(description="entries in the fit (same σ, visible to you)")


class LeaderboardRowPublic(BaseModel):
    rank: int
    submission_id: int
    model_name: str
    owner: str
    authors: list[str]
    paper_url: str | None
    code_url: str | None
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
    metrics: Metrics
    effective_robustness: ERCellPublic | None = Field(
        default=None,
        description="ER on the benchmark aggregate for an OOD benchmark's entries (null on a "
        "clean benchmark, or with fewer than 3 matched entries at this σ); " + ER_HELP,
    )
    tied_with: int | None = Field(
        default=None,
        description=(
            "rank of the entry just above when this entry does not differ significantly from it "
            "in the sorted figure (paired test on the same images, p ≥ 0.05): shown as "
            '"tied with #k"; null when it differs, for the first entry, or for a sort key '
            "without paired tests (only mACR, certified accuracy and band means have them)"
        ),
    )
    tie: TiePublic | None = Field(default=None, description="the test behind `tied_with`")
    weights: WeightsLinkPublic | None = Field(
        default=None,
        description="model zoo: where to download the weights when the submitter published "
        "them under a licence; null otherwise",
    )


class LeaderboardPublic(BaseModel):
    benchmark: str
    protocol_version: str
    sort: str
    order: Literal["asc", "desc"]
    total: int
    offset: int
    limit: int
    higher_is_better: dict[str, bool]
    rows: list[LeaderboardRowPublic]

    @classmethod
    def of(cls, page: LeaderboardPage) -> LeaderboardPublic:
        rows = []
        for row in page.rows:
            metadata = row.submission.artifact.manifest.get("metadata", {})
            rows.append(
                LeaderboardRowPublic(
                    rank=row.rank,
                    submission_id=row.submission.id,
                    model_name=row.submission.model_name,
                    owner=row.owner,
                    authors=list(metadata.get("authors") or []),
                    paper_url=metadata.get("paper_url"),
                    code_url=metadata.get("code_url"),
                    architecture=row.submission.architecture,
                    sigma=row.submission.sigma,
                    extra_data=row.submission.extra_data,
                    venue=row.submission.venue,
                    is_baseline=row.submission.is_baseline,
                    flagged=row.submission.flagged,
                    flag_reason=row.submission.flag_reason,
                    submitted_at=row.submission.created_at,
                    finished_at=row.entry.finished_at,
                    protocol_version=row.entry.protocol_version,
                    metrics=Metrics.of(row.entry),
                    weights=WeightsLinkPublic.of(row.submission),
                )
            )
        return cls(
            benchmark=page.benchmark.name,
            protocol_version=page.query.protocol_version or page.benchmark.protocol_version,
            sort=page.query.sort,
            order=page.query.order,
            total=page.total,
            offset=page.query.offset,
            limit=page.query.limit,
            higher_is_better=HIGHER_IS_BETTER,
            rows=rows,
        )


class TestSetResultPublic(BaseModel):
    __test__ = False

    test_set: str
    band: str | None
    attributes: dict[str, Any]
    acr: float
    certified_accuracy: dict[str, float]
    clean_accuracy: float
    abstain_rate: float
    pa_median: float
    pa_quantiles: dict[str, float]
    count: int
    seconds: float
    protocol_version: str
    evaluator_version: str
    records_url: str
    intervals: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "95 % intervals over this test set's images: acr (bootstrap), certified_accuracy by "
            "radius, clean_accuracy and abstain_rate (Clopper-Pearson), pa_quantiles "
            "(bootstrap), each {estimate, ci_low, ci_high, level, method}; pa_band_half_width "
            "of the simultaneous band on the p_A curve"
        ),
    )

    @classmethod
    def of(cls, result: TestSetResult, *, records_url: str) -> TestSetResultPublic:
        return cls(
            test_set=result.test_set.name,
            band=result.test_set.band,
            attributes=dict(result.test_set.attributes),
            acr=result.acr,
            certified_accuracy=dict(result.certified_accuracy),
            clean_accuracy=result.clean_accuracy,
            abstain_rate=result.abstain_rate,
            pa_median=result.pa_median,
            pa_quantiles=dict(result.pa_quantiles),
            count=result.count,
            seconds=result.seconds,
            protocol_version=result.protocol_version,
            evaluator_version=result.evaluator_version,
            records_url=records_url,
            intervals=_json_safe(result.intervals),
        )


class RobustnessPublic(BaseModel):
    """Robustness of the submission's base classifier (Muthukumar et al. 2025, §6): the
    deterministic model,
    not the smoothed one, attacked on the benchmark's clean subset. Accuracies are fractions of
    ``count`` images; ε is in units of 1/255."""

    base_accuracy: float = Field(
        description="clean accuracy of the base classifier (deterministic model, not smoothed)"
    )
    linf_acc_8: float | None = Field(description=LINF_HELP.format(eps=8))
    linf_acc_16: float | None = Field(description=LINF_HELP.format(eps=16))
    pd_acc_8: float | None = Field(description=PD_HELP.format(eps=8))
    pd_acc_16: float | None = Field(description=PD_HELP.format(eps=16))
    figures: dict[str, float | None] = Field(
        description=(
            "every figure of the report: clean_accuracy, count and, per ε tag t (8, 16 = ε in "
            "1/255): linf_robust_accuracy_t, pd_robust_accuracy_t (ℓ∞ ∩ PD), "
            "pd_projected_accuracy_t (ℓ∞ APGD then lazy PD projection alone, the paper's "
            "protocol), pd_aware_accuracy_t (PD-aware APGD alone), linf_pd_threat_median_t "
            "(median d_PD of the ℓ∞ adversarial examples; null when none was found)"
        ),
        examples=[
            {
                "clean_accuracy": 0.92,
                "count": 500,
                "linf_robust_accuracy_8": 0.41,
                "pd_robust_accuracy_8": 0.63,
                "pd_projected_accuracy_8": 0.71,
                "pd_aware_accuracy_8": 0.66,
                "linf_pd_threat_median_8": 0.037,
            }
        ],
    )
    protocol: dict[str, Any] = Field(
        description=(
            "attack settings and the anchor bank's provenance: benchmark protocol (eps in 1/255 "
            "units, k, anchor_seed, n_iter, n_target_classes, projection, weighting, image "
            "subset) plus anchors_sha256 of the bank actually used"
        )
    )
    count: int = Field(description="clean images attacked")
    seconds: float = Field(description="attack time summed over shards")
    evaluator_version: str

    @classmethod
    def of(cls, result: RobustnessResult) -> RobustnessPublic:
        return cls(
            base_accuracy=result.base_accuracy,
            linf_acc_8=result.linf_acc_8,
            linf_acc_16=result.linf_acc_16,
            pd_acc_8=result.pd_acc_8,
            pd_acc_16=result.pd_acc_16,
            figures={k: _finite_or_none(v) for k, v in result.figures.items()},
            protocol=public_protocol(result.protocol) or {},
            count=result.count,
            seconds=result.seconds,
            evaluator_version=result.evaluator_version,
        )


def _finite_or_none(value: float | None) -> float | None:
    """JSON has no NaN: an undefined figure (e.g. a median of no examples) is served as null."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


class StageResultPublic(BaseModel):
    """One stored result of an evaluation stage: its unit (a test set, or empty for a stage with
    one unit), the stage's JSON summary, the protocol as run (no local paths) and seeds."""

    stage: str
    unit: str
    summary: dict[str, Any]
    protocol: dict[str, Any]
    seeds: dict[str, Any]
    data_hashes: dict[str, Any]
    count: int
    seconds: float
    evaluator_version: str

    @classmethod
    def of(cls, row: StageResult) -> StageResultPublic:
        return cls(
            stage=row.stage,
            unit=row.unit,
            summary=_json_safe(row.summary),
            protocol=public_protocol(row.protocol) or {},
            seeds=dict(row.seeds),
            data_hashes=dict(row.data_hashes),
            count=row.count,
            seconds=row.seconds,
            evaluator_version=row.evaluator_version,
        )


def _json_safe(value: Any) -> Any:
    """Non-finite floats become null (JSON has no NaN), recursively."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if isinstance(value, float):
        return _finite_or_none(value)
    return value


class PaBandPublic(BaseModel):
    """Simultaneous 95 % band around the entry's p_A curve (the complementary ECDF of Sun, Mao,
    Müller & Vechev 2025, averaged over test sets): every point of the curve ± ``half_width``
    covers the true curve at once. One test set: the exact Kolmogorov band. Several: each test
    set's band at level 1 − 0.05/S (Bonferroni), half-widths averaged; each test set's own band
    is ``results[i].intervals.pa_band_half_width``."""

    half_width: float
    level: float
    method: str = Field(examples=["kolmogorov", "kolmogorov, bonferroni over test sets"])
    test_sets: int


class ResultsPublic(BaseModel):
    submission_id: int
    benchmark: str
    model_name: str
    state: SubmissionState
    protocol_version: str
    manifest: dict[str, Any]
    summary: Metrics | None
    results: list[TestSetResultPublic]
    robustness: RobustnessPublic | None = Field(
        default=None,
        description=(
            "base-classifier robustness (Muthukumar et al. 2025); null for a benchmark without "
            "the stage or "
            "before it is measured"
        ),
    )
    stages: list[StageResultPublic] = Field(
        default_factory=list,
        description="every stored stage result (each stage's summary per unit), for any stage",
    )
    seed: SeedPublic | None = Field(
        default=None,
        description="the run's noise seed: its commitment, and the seed once the run has ended",
    )
    weights: WeightsLinkPublic | None = Field(
        default=None,
        description="model zoo: where to download the weights when the submitter published "
        "them under a licence and the entry is finished, public and visible; null otherwise",
    )
    pa_band: PaBandPublic | None = Field(
        default=None,
        description="simultaneous 95 % band of the p_A curve over the test sets; null before "
        "results exist",
    )


class ComparedEntry(BaseModel):
    submission_id: int
    model_name: str
    sigma: float


class PairComparisonPublic(BaseModel):
    a: int = Field(description="submission id of entry A")
    b: int = Field(description="submission id of entry B")
    tests: list[PairedTestPublic]


class ComparisonPublic(BaseModel):
    """Paired tests between entries of one benchmark, certified on the same images: mACR (ACR
    for one test set) and band means by paired bootstrap over the shared source images,
    certified accuracy at each radius by exact McNemar (one test set) or paired bootstrap."""

    benchmark: str
    alpha: float
    entries: list[ComparedEntry]
    pairs: list[PairComparisonPublic] = Field(description="every pair of the entries, A before B")


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ready", "unavailable"]
    database: str
    migrations: str
    queue: str
    embedded_broker: bool
