"""Backfill of interval bounds, per-test-set intervals and image terms for leaderboard entries
aggregated before the service computed them (``certbench results backfill-intervals``).

Everything comes from the stored per-image records (no certification is re-run): the same
functions the certification stage's merge uses (``models.stages.certification.intervals``) and,
for every other stage with intervals, its ``Stage.uncertainty`` as the pipeline calls it after a
merge (``models.boards.uncertainty``), so a backfilled entry holds exactly what a fresh aggregate
would have stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from models.boards import read_model as leaderboard_rows
from models.boards import uncertainty as stage_uncertainty
from models.catalog.benchmarks import get_benchmark
from models.core.settings import Settings
from models.db.entities import LeaderboardEntry, MetricValue, StageResult, Submission
from models.db.states import SubmissionState
from models.stages import registry
from models.stages.base import CI_HIGH, CI_LOW, Stage, Uncertainty
from models.stages.certification.intervals import (
    TERMS_UNIT,
    bound_keys,
    entry_intervals,
    set_intervals,
)
from models.submissions import storage

STAGE = "certification"


@dataclass
class BackfillReport:
    """Entries filled, and entries skipped with the reason (records not on this server)."""

    filled: list[int] = field(default_factory=list)
    skipped: dict[int, str] = field(default_factory=dict)


def entries_to_backfill(
    session: Session, *, benchmark: str | None = None, force: bool = False
) -> list[int]:
    """Finished entries (of one benchmark) that lack interval bounds; every one with ``force``."""
    query = (
        select(LeaderboardEntry.submission_id)
        .join(Submission, Submission.id == LeaderboardEntry.submission_id)
        .where(Submission.state == SubmissionState.FINISHED)
        .order_by(LeaderboardEntry.submission_id)
    )
    if benchmark is not None:
        query = query.where(LeaderboardEntry.benchmark_id == get_benchmark(session, benchmark).id)
    ids = list(session.scalars(query))
    if force:
        return ids
    done = set(
        session.scalars(
            select(MetricValue.submission_id).where(
                MetricValue.key == "macr_ci_low", MetricValue.submission_id.in_(ids)
            )
        )
    )
    lacking = _stages_lacking_bounds(session, ids)
    return [i for i in ids if i not in done or i in lacking]


def _stages_lacking_bounds(session: Session, ids: list[int]) -> set[int]:
    """Entries with results of a stage that has intervals but no stored bound of that stage."""
    stages = {stage.name for stage in registry.all_stages() if stage.has_intervals}
    with_results = {
        (row[0], row[1])
        for row in session.execute(
            select(StageResult.submission_id, StageResult.stage)
            .where(StageResult.submission_id.in_(ids), StageResult.stage.in_(stages))
            .distinct()
        )
    }
    with_bounds = {
        (row[0], row[1])
        for row in session.execute(
            select(MetricValue.submission_id, MetricValue.stage)
            .where(
                MetricValue.submission_id.in_(ids),
                MetricValue.stage.in_(stages),
                MetricValue.key.endswith(CI_LOW, autoescape=True),
            )
            .distinct()
        )
    }
    return {submission_id for submission_id, _ in with_results - with_bounds}


def backfill_entry(session: Session, submission_id: int, *, settings: Settings) -> str | None:
    """Compute and store one entry's intervals from its records. Returns None when done, else
    why it was skipped (nothing is changed then)."""
    from certbench.smoothing import read_table, write_table_atomic

    submission = session.get(Submission, submission_id)
    if submission is None:
        return "no such submission"
    rows = list(
        session.scalars(
            select(StageResult).where(
                StageResult.submission_id == submission_id, StageResult.stage == STAGE
            )
        )
    )
    if not rows:
        return "no certification results"
    tables = {}
    for row in rows:
        path = storage.resolve(settings.artifacts_dir, row.records_path)
        if not path.is_file():
            return f"records of test set {row.unit!r} are missing ({row.records_path})"
        tables[row.unit] = read_table(path).replace_schema_metadata(None)
    others, reason = _other_stages(session, submission, settings)
    if reason is not None:
        return reason
    band_of = {ts.name: ts.band for ts in submission.benchmark.test_sets}
    bounds, terms = entry_intervals(tables, {unit: band_of.get(unit) for unit in tables})
    for row in rows:
        row.summary = {**row.summary, "intervals": set_intervals(tables[row.unit])}
    session.execute(
        delete(MetricValue).where(
            MetricValue.submission_id == submission_id, MetricValue.key.in_(bound_keys())
        )
    )
    for key, value in bounds.items():
        session.add(
            MetricValue(
                submission_id=submission_id,
                benchmark_id=submission.benchmark_id,
                stage=STAGE,
                key=key,
                value=value,
            )
        )
    if terms is not None:
        relpath = storage.test_set_records_relpath(submission_id, TERMS_UNIT)
        write_table_atomic(terms, storage.resolve(settings.artifacts_dir, relpath))
    for stage, found in others:
        _store_stage(session, submission, stage, found, settings=settings)
    leaderboard_rows.refresh(session, [submission_id])
    session.commit()
    return None


def _other_stages(
    session: Session, submission: Submission, settings: Settings
) -> tuple[list[tuple[Stage, Uncertainty]], str | None]:
    """The uncertainty of every other stage with intervals the entry has results of, or the
    reason to skip the entry (a records file missing on this server)."""
    out = []
    protocols = submission.benchmark.stages or {}
    for stage in registry.all_stages():
        if not stage.has_intervals:
            continue
        rows = session.scalars(
            select(StageResult).where(
                StageResult.submission_id == submission.id, StageResult.stage == stage.name
            )
        ).all()
        if not rows:
            continue
        records = {row.unit: storage.resolve(settings.artifacts_dir, row.records_path)
                   for row in rows}  # fmt: skip
        missing = [unit for unit, path in records.items() if not path.is_file()]
        if missing:
            return [], f"{stage.name} records of unit(s) {missing} are missing"
        found = stage_uncertainty.compute(stage, protocols.get(stage.name), records)
        if found is not None:
            out.append((stage, found))
    return out, None


def _store_stage(
    session: Session,
    submission: Submission,
    stage: Stage,
    found: Uncertainty,
    *,
    settings: Settings,
) -> None:
    """Replace the stage's stored bounds of one entry and its terms file."""
    session.execute(
        delete(MetricValue).where(
            MetricValue.submission_id == submission.id,
            MetricValue.stage == stage.name,
            MetricValue.key.endswith(CI_LOW, autoescape=True)
            | MetricValue.key.endswith(CI_HIGH, autoescape=True),
        )
    )
    for key, value in found.bounds().items():
        session.add(
            MetricValue(
                submission_id=submission.id,
                benchmark_id=submission.benchmark_id,
                stage=stage.name,
                key=key,
                value=value,
            )
        )
    stage_uncertainty.write_terms(stage, submission.id, found, settings=settings)
