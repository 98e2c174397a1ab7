"""Turn recorded shards into per-test-set results and a leaderboard entry.

The workers' aggregate step calls ``complete_submission``; both functions are idempotent, so a
redelivered aggregate task finds the results in place and only finishes the state change. Metrics
come from ``certbench.metrics`` on the merged per-image records, never from the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

import numpy as np
import pyarrow as pa
from sqlalchemy import select
from sqlalchemy.orm import Session

from certbench.metrics import macr, summarize
from certbench.records import read_table, write_records
from certbench.records import table_to_records as _table_to_records
from models import storage
from models.entities import LeaderboardEntry, Result, RobustnessResult, Shard, Submission, TestSet
from models.errors import InvalidTransitionError, StorageError
from models.pipeline import check_shards_complete, get_submission, transition
from models.robustness import aggregate_robustness, leaderboard_columns
from models.settings import Settings
from models.states import Reason, SubmissionState

S = SubmissionState
RADIUS_COLUMNS = {0.0: "cert_acc_000", 0.25: "cert_acc_025", 0.5: "cert_acc_050",
                  0.75: "cert_acc_075", 1.0: "cert_acc_100"}  # fmt: skip


def evaluator_version() -> str:
    """Version of the certbench code that computed a result (stored with every result)."""
    try:
        return version("certbench")
    except PackageNotFoundError as err:
        raise StorageError("certbench is not installed; run `uv sync`") from err


def aggregate_test_set(
    session: Session, submission_id: int, test_set_id: int, *, settings: Settings
) -> Result:
    """Merge a test set's shard records into one parquet file and store its metrics.

    Returns the existing Result if one is stored already. Raises StorageError when shards are
    missing (the plan is not complete) or a records file is gone.
    """
    existing = session.scalar(
        select(Result).where(
            Result.submission_id == submission_id, Result.test_set_id == test_set_id
        )
    )
    if existing is not None:
        return existing
    submission = get_submission(session, submission_id)
    test_set = session.get(TestSet, test_set_id)
    if test_set is None or test_set.benchmark_id != submission.benchmark_id:
        raise StorageError(
            f"test set {test_set_id} is not part of submission {submission_id}'s benchmark"
        )
    shards = list(
        session.scalars(
            select(Shard)
            .where(Shard.submission_id == submission_id, Shard.test_set_id == test_set_id)
            .order_by(Shard.shard_index)
        )
    )
    check_shards_complete(
        shards, test_set.num_images, what=f"test set {test_set.name!r}", settings=settings
    )
    tables = [read_table(storage.resolve(settings.artifacts_dir, s.records_path)) for s in shards]
    merged = pa.concat_tables([t.replace_schema_metadata(None) for t in tables])
    records = _table_to_records(merged)
    relpath = storage.test_set_records_relpath(submission_id, test_set.name)
    write_records(
        records,
        storage.resolve(settings.artifacts_dir, relpath),
        metadata={
            "submission_id": submission_id,
            "test_set": test_set.name,
            "protocol_version": submission.protocol_version,
            "evaluator_version": evaluator_version(),
        },
    )
    summary = summarize(records)
    result = Result(
        submission_id=submission_id,
        test_set_id=test_set_id,
        protocol_version=submission.protocol_version,
        evaluator_version=evaluator_version(),
        acr=summary.acr,
        certified_accuracy={f"{r:g}": v for r, v in summary.certified_accuracy.items()},
        clean_accuracy=summary.clean_accuracy,
        abstain_rate=summary.abstain_rate,
        pa_median=summary.pa_median,
        pa_quantiles={f"{q:g}": v for q, v in summary.pa_quantiles.items()},
        count=summary.count,
        seconds=float(sum(s.seconds for s in shards)),
        records_path=relpath,
    )
    session.add(result)
    session.commit()
    return result


def complete_submission(session: Session, submission_id: int, *, settings: Settings) -> bool:
    """Aggregate every test set and the robustness stage, write the leaderboard entry and move
    running → finished.

    Returns False (after storing the results) when the submission is no longer running, e.g. it
    was cancelled meanwhile; then no leaderboard entry is written.
    """
    submission = get_submission(session, submission_id)
    if submission.state != S.RUNNING:
        return False
    results = [
        aggregate_test_set(session, submission_id, ts.id, settings=settings)
        for ts in submission.benchmark.test_sets
    ]
    robust = aggregate_robustness(
        session, submission_id, evaluator_version=evaluator_version(), settings=settings
    )
    entry = _leaderboard_entry(submission, results, robust)
    if session.get(LeaderboardEntry, submission_id) is None:
        session.add(entry)
        session.commit()
    moved = transition(
        session,
        submission_id,
        from_states={S.RUNNING},
        to_state=S.FINISHED,
        reason=Reason.COMPLETED.value,
        message=f"certified on {len(results)} test set(s)"
        + (f"; attacked {robust.count} clean image(s) (ℓ∞, ℓ∞ ∩ PD)" if robust else ""),
    )
    if not moved:
        stale = session.get(LeaderboardEntry, submission_id)
        if stale is not None:
            session.delete(stale)
            session.commit()
    else:
        submission = get_submission(session, submission_id)
        submission.progress = 1.0
        session.commit()
    return moved


def _leaderboard_entry(
    submission: Submission, results: Sequence[Result], robust: RobustnessResult | None
) -> LeaderboardEntry:
    if not results:
        raise InvalidTransitionError(f"submission {submission.id} has no results to rank")
    names = {r.test_set_id: r.test_set.name for r in results}
    band_of = {ts.id: ts.band for ts in submission.benchmark.test_sets}
    bands: dict[str, list[float]] = {}
    for r in results:
        if band_of.get(r.test_set_id):
            bands.setdefault(band_of[r.test_set_id], []).append(r.acr)

    def mean(values: Sequence[float]) -> float:
        return float(np.mean(values))

    columns: dict[str, float | None] = {
        column: mean([r.certified_accuracy[f"{radius:g}"] for r in results])
        for radius, column in RADIUS_COLUMNS.items()
    }
    if robust is not None:
        columns.update(base_accuracy=robust.base_accuracy, **leaderboard_columns(robust.figures))
    return LeaderboardEntry(
        submission_id=submission.id,
        benchmark_id=submission.benchmark_id,
        protocol_version=submission.protocol_version,
        macr=macr({names[r.test_set_id]: r.acr for r in results}),
        clean_accuracy=mean([r.clean_accuracy for r in results]),
        abstain_rate=mean([r.abstain_rate for r in results]),
        pa_median=mean([r.pa_median for r in results]),
        pa_q10=mean([r.pa_quantiles["0.1"] for r in results]),
        pa_q25=mean([r.pa_quantiles["0.25"] for r in results]),
        pa_q75=mean([r.pa_quantiles["0.75"] for r in results]),
        pa_q90=mean([r.pa_quantiles["0.9"] for r in results]),
        band_low=mean(bands["low"]) if "low" in bands else None,
        band_mid=mean(bands["mid"]) if "mid" in bands else None,
        band_high=mean(bands["high"]) if "high" in bands else None,
        test_sets=len(results),
        count=sum(r.count for r in results),
        seconds=float(sum(r.seconds for r in results)),
        **columns,
    )
