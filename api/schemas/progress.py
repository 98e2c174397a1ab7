"""Response shapes of progress, throughput, ETA and estimated work (``models.runs.progress``,
``models.runs.estimates``). Field names are stable: clients (the ``certbench`` CLI) read
``progress``, ``eta_seconds``, ``throughput`` and ``estimate`` from the submission JSON."""

from __future__ import annotations

from pydantic import BaseModel, Field

from models.db.states import SubmissionState
from models.runs.estimates import Rate, WorkEstimate
from models.runs.progress import ProgressReport

SAMPLES = (
    "forward passes of one image through the network under the stage's protocol estimate "
    "(certification: noisy samples; attacks: their forward passes, backward passes not counted)"
)


class ThroughputPublic(BaseModel):
    """Measured throughput, never an assumed figure."""

    samples_per_second: float = Field(description=f"{SAMPLES}, per second")
    images_per_second: float = Field(description="images (the stage's work units) per second")
    basis: str = Field(description="what it was measured on", examples=["2 shard(s) running now"])

    @classmethod
    def of(cls, rate: Rate | None) -> ThroughputPublic | None:
        if rate is None:
            return None
        return cls(
            samples_per_second=rate.samples_per_second,
            images_per_second=rate.images_per_second,
            basis=rate.basis,
        )


class StageEstimatePublic(BaseModel):
    """One stage's share of the estimated work."""

    stage: str
    forward_passes: int
    exact: bool = Field(description="false when the figure is a bound (said in ``note``)")
    basis: str = Field(description="how the figure follows from the benchmark's protocol")
    note: str = Field(description="what is approximate about it, and in which direction")
    samples_per_second: float | None = Field(
        description="this fleet's measured throughput for the stage (its recent recorded "
        "shards); null when it never ran here"
    )


class EstimatePublic(BaseModel):
    """The work of a submission, estimated from the protocol before anything runs."""

    forward_passes: int = Field(description=f"total {SAMPLES}")
    seconds: float | None = Field(
        description="that work at this fleet's measured throughput per stage (one worker); "
        "null when a stage was never measured here (``basis`` says which)"
    )
    exact: bool = Field(description="false when a stage's figure is an upper or lower bound")
    basis: str = Field(description="each stage's count and the rates the time assumes")
    stages: list[StageEstimatePublic]
    flops: int | None = Field(
        default=None,
        description="forward_passes × the network's FLOPs per sample (counted on the meta "
        "device at intake): what the daily compute quota charges; null where the network is "
        "not known (a benchmark's estimate)",
    )

    @classmethod
    def of(cls, estimate: WorkEstimate) -> EstimatePublic:
        return cls(
            forward_passes=estimate.forward_passes,
            seconds=estimate.seconds,
            exact=estimate.exact,
            basis=estimate.basis,
            flops=estimate.flops,
            stages=[
                StageEstimatePublic(
                    stage=s.stage,
                    forward_passes=s.forward_passes,
                    exact=s.exact,
                    basis=s.basis,
                    note=s.note,
                    samples_per_second=(
                        estimate.rates[s.stage].samples_per_second
                        if s.stage in estimate.rates
                        else None
                    ),
                )
                for s in estimate.stages
            ],
        )


class TestSetProgress(BaseModel):
    """A certification test set's images certified so far (the rows ``/progress`` returned
    before it covered every stage; same fields)."""

    __test__ = False

    test_set: str
    images_done: int
    images_total: int


class UnitProgressPublic(BaseModel):
    """One unit of one stage (a certification test set, a weather set, ...)."""

    stage: str
    unit: str = Field(description='the stage\'s name for the piece of work ("" for one unit)')
    shards_done: int
    shards_running: int
    shards_total: int = Field(description="shards at this server's shard size")
    images_done: int = Field(description="recorded shards' images + running shards' so far")
    images_total: int
    samples_done: int = Field(description=f"{SAMPLES}, done")
    samples_total: int


class StageProgressPublic(BaseModel):
    """One stage over all its units."""

    stage: str
    title: str
    images_done: int
    images_total: int
    samples_done: int
    samples_total: int
    exact: bool = Field(description="false when samples_total is a bound (see the estimate)")
    throughput: ThroughputPublic | None = Field(
        description="measured on this submission: its running shards now, else its recorded "
        "ones; null before any of its shards reported"
    )
    eta_seconds: float | None = Field(description="the stage's remaining work at its rate")


class ProgressPublic(BaseModel):
    """Progress of every stage and unit (``GET /api/v1/submissions/{id}/progress``).

    Changed in this version: the endpoint returned a bare list of certification test-set rows;
    those rows (same fields) are now ``test_sets``."""

    submission_id: int
    state: SubmissionState
    progress: float = Field(
        description="fraction of the estimated forward passes done; the same figure as the "
        "submission's ``progress``"
    )
    images_done: int
    images_total: int
    samples_done: int = Field(description=f"{SAMPLES}, done (recorded + running shards)")
    samples_total: int = Field(description="the estimated total (``estimate.forward_passes``)")
    throughput: ThroughputPublic | None
    eta_seconds: float | None
    eta_basis: str
    estimate: EstimatePublic
    stages: list[StageProgressPublic]
    units: list[UnitProgressPublic]
    test_sets: list[TestSetProgress] = Field(
        description="certification's units as the earlier version of this endpoint listed them"
    )

    @classmethod
    def of(cls, report: ProgressReport) -> ProgressPublic:
        return cls(
            submission_id=report.submission_id,
            state=report.state,
            progress=report.fraction,
            images_done=report.images_done,
            images_total=report.images_total,
            samples_done=report.samples_done,
            samples_total=report.samples_total,
            throughput=ThroughputPublic.of(report.throughput),
            eta_seconds=report.eta_seconds,
            eta_basis=report.eta_basis,
            estimate=EstimatePublic.of(report.estimate),
            stages=[
                StageProgressPublic(
                    stage=s.stage,
                    title=s.title,
                    images_done=s.images_done,
                    images_total=s.images_total,
                    samples_done=s.samples_done,
                    samples_total=s.samples_total,
                    exact=s.exact,
                    throughput=ThroughputPublic.of(s.throughput),
                    eta_seconds=s.eta_seconds,
                )
                for s in report.stages
            ],
            units=[UnitProgressPublic(**vars(u)) for u in report.units],
            test_sets=[
                TestSetProgress(
                    test_set=u.unit, images_done=u.images_done, images_total=u.images_total
                )
                for u in report.units
                if u.stage == "certification"
            ],
        )
