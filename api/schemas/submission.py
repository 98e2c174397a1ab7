"""Request and response shapes of submissions (``/api/v1/submissions``, moderation and reruns):
state, progress, the run's noise seed and its event history. Built from ORM rows by
``SubmissionPublic.of``; file paths never leak."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.progress import EstimatePublic, ThroughputPublic
from api.schemas.zoo import WeightsLinkPublic
from models.db.entities import Submission
from models.db.states import SubmissionState
from models.runs.progress import ProgressReport
from models.submissions.run_seeds import SeedView


class SeedPublic(BaseModel):
    """The noise seed of a submission's current run (commit-reveal,
    ``models.submissions.run_seeds``)."""

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
        another user's private or hidden entry); ``report``: its progress
        (``models.runs.progress``), whose fraction replaces the stored one."""
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
