"""Backfill of interval bounds, per-test-set intervals and image terms for leaderboard entries
aggregated before the service computed them (``certbench results backfill-intervals``).

Everything comes from the stored per-image records (no certification is re-run): the same
functions the certification stage's merge uses (``models.stages.certification_intervals``), so
a backfilled entry holds exactly what a fresh aggregate would have stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from models import storage
from models.catalog import get_benchmark
from models.entities import LeaderboardEntry, MetricValue, StageResult, Submission
from models.settings import Settings
from models.stages.certification_intervals import (
    TERMS_UNIT,
    bound_keys,
    entry_intervals,
    set_intervals,
)
from models.states import SubmissionState

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
    return [i for i in ids if i not in done]


def backfill_entry(session: Session, submission_id: int, *, settings: Settings) -> str | None:
    """Compute and store one entry's intervals from its records. Returns None when done, else
    why it was skipped (nothing is changed then)."""
    from certbench.records import read_table, write_table_atomic

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
    session.commit()
    return None
