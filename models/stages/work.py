"""What a worker needs to evaluate one submission: a snapshot read from the database.

Workers pass submission ids, never ORM objects; each task re-reads a ``WorkItem`` and hands it to
the stages (``models.stages``), which need nothing else from the database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from models.benchmarks.sources import TestSetSpec, spec_of_test_set
from models.core.settings import Settings
from models.db.entities import Benchmark
from models.db.states import SubmissionState
from models.submissions import storage
from models.submissions.lifecycle import get_submission
from models.submissions.run_seeds import run_seed, seed_text


@dataclass(frozen=True)
class WorkItem:
    """Everything a worker needs to validate and evaluate one submission.

    ``stages`` holds the stored protocol of every stage beyond certification the benchmark runs
    (stage name → JSON row); each stage resolves its own block. ``seed`` is the run's noise seed
    (``models.submissions.run_seeds``): secret until the run ends, so it is left out of ``repr``
    (logs, tracebacks) and files written before the end carry ``seed_commitment`` instead.
    """

    submission_id: int
    state: SubmissionState
    attempt: int
    benchmark: str
    num_classes: int
    sigma: float
    n0: int
    n: int
    alpha: float
    seed: int = field(repr=False)
    protocol_version: str
    manifest: dict[str, Any]
    weights_path: Path | None
    test_sets: tuple[TestSetSpec, ...]
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    seed_commitment: str = ""
    seed_kind: str = "public"
    flops_per_sample: int | None = None
    """The network's FLOPs per noise sample as intake counted them (None: a submission made
    before intake counted them, or a planning item)."""

    @property
    def seed_text(self) -> str:
        """The seed as revealed (``0x…`` for a secret seed, decimal for a public one)."""
        return seed_text(self.seed) if self.seed_kind == "secret" else str(self.seed)

    def test_set(self, name: str) -> TestSetSpec:
        """The benchmark's test set called ``name`` (a certification unit). Raises KeyError."""
        for test_set in self.test_sets:
            if test_set.name == name:
                return test_set
        raise KeyError(f"benchmark {self.benchmark!r} has no test set {name!r}")


def get_work_item(session: Session, submission_id: int, *, settings: Settings) -> WorkItem:
    """Snapshot of a submission for a worker. Raises NotFoundError."""
    submission = get_submission(session, submission_id)
    benchmark = submission.benchmark
    seed, seed_row = run_seed(session, submission)
    artifact = submission.artifact
    weights = (
        storage.resolve(settings.artifacts_dir, artifact.weights_path)
        if artifact.weights_path
        else None
    )
    specs = tuple(spec_of_test_set(ts, settings) for ts in benchmark.test_sets)
    return WorkItem(
        submission_id=submission.id,
        state=submission.state,
        attempt=submission.attempt,
        benchmark=benchmark.name,
        num_classes=benchmark.num_classes,
        sigma=submission.sigma,
        n0=benchmark.n0,
        n=benchmark.n,
        alpha=benchmark.alpha,
        seed=seed,
        protocol_version=submission.protocol_version,
        manifest=dict(artifact.manifest),
        weights_path=weights,
        test_sets=specs,
        stages={name: dict(row) for name, row in (benchmark.stages or {}).items()},
        seed_commitment=seed_row.commitment if seed_row is not None else "",
        seed_kind=seed_row.kind if seed_row is not None else "public",
        flops_per_sample=submission.flops_per_sample,
    )


def planning_item(
    benchmark: Benchmark, *, sigma: float, manifest: dict[str, Any], settings: Settings
) -> WorkItem:
    """A work item for planning only: what a submission of this manifest to ``benchmark`` would
    run, before (or without) a submission row: the estimate at intake, a benchmark page, the
    progress of many submissions at once. It has no submission id, weights or seed (the secret
    seed is never read for planning); stages' ``units`` and ``estimate`` need none of them."""
    specs = tuple(spec_of_test_set(ts, settings) for ts in benchmark.test_sets)
    return WorkItem(
        submission_id=0,
        state=SubmissionState.SUBMITTED,
        attempt=0,
        benchmark=benchmark.name,
        num_classes=benchmark.num_classes,
        sigma=sigma,
        n0=benchmark.n0,
        n=benchmark.n,
        alpha=benchmark.alpha,
        seed=0,
        protocol_version=benchmark.protocol_version,
        manifest=dict(manifest),
        weights_path=None,
        test_sets=specs,
        stages={name: dict(row) for name, row in (benchmark.stages or {}).items()},
    )
