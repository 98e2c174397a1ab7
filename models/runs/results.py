"""Turn recorded shards into stored results and a leaderboard entry, for every stage alike.

The workers' aggregate step calls ``complete_submission``: each stage's ``merge`` reads its shard
files and writes merged records (atomically); the results, the metric values and the leaderboard
entry are then stored in ONE transaction, so a crash leaves either nothing or everything, and a
redelivered aggregate finds the entry in place and only finishes the state change. Figures come
from the per-image records (``certbench``), never from the model.

Two aggregates of one submission may run at once (two workers' control consumers, each sent one
by a shard that found every shard recorded): the leaderboard entry's primary key fences them.
The second one to store gets an IntegrityError, rolls its transaction back and finds the first
one's entry; exactly one of them moves the state to finished (compare-and-set), and the other
leaves the entry in place (it drops it only when the run did not finish: cancelled meanwhile).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from models.boards import read_model as leaderboard_rows
from models.boards.uncertainty import with_uncertainty
from models.core.errors import InvalidTransitionError, StorageError
from models.core.settings import Settings
from models.db.entities import LeaderboardEntry, LeaderboardFigures, MetricValue, StageResult
from models.db.states import Reason, SubmissionState
from models.runs import shards
from models.stages.base import MergeContext, RecordedShard, Stage, StageOutcome
from models.stages.work import WorkItem, get_work_item
from models.submissions import storage
from models.submissions.lifecycle import get_state, get_submission, transition

S = SubmissionState


def evaluator_version() -> str:
    """Version of the certbench code that computed a result (stored with every result)."""
    try:
        return version("certbench")
    except PackageNotFoundError as err:
        raise StorageError("certbench is not installed; run `uv sync`") from err


def merge_stage(
    session: Session, item: WorkItem, stage: Stage, *, settings: Settings
) -> StageOutcome:
    """Check that the stage's shards tile every unit, then run its ``merge`` and add the
    intervals of its figures (``models.boards.uncertainty``).

    Raises StorageError when shards are missing (the plan is not complete) or a file is gone.
    """
    by_unit: dict[str, list[RecordedShard]] = {}
    rows = shards.recorded(session, item.submission_id, stage=stage.name)
    for unit in stage.units(item, settings):
        unit_rows = [r for r in rows if r.unit == unit.name]
        what = f"test set {unit.name!r}" if unit.name else f"the {stage.name} stage"
        shards.check_complete(unit_rows, unit.num_images, what=what, settings=settings)
        by_unit[unit.name] = [
            RecordedShard(
                unit=r.unit,
                shard_index=r.shard_index,
                start=r.start,
                stop=r.stop,
                count=r.count,
                seconds=r.seconds,
                path=storage.resolve(settings.artifacts_dir, r.records_path),
            )
            for r in unit_rows
        ]

    def target_for(unit: str) -> tuple[str, Path]:
        relpath = storage.test_set_records_relpath(item.submission_id, stage.folder(unit))
        return relpath, storage.resolve(settings.artifacts_dir, relpath)

    context = MergeContext(evaluator_version=evaluator_version(), target_for=target_for)
    outcome = stage.merge(item, by_unit, context, settings)
    return with_uncertainty(
        stage,
        item.stages.get(stage.name),
        outcome,
        submission_id=item.submission_id,
        settings=settings,
    )


def complete_submission(
    session: Session, submission_id: int, *, settings: Settings, item: WorkItem | None = None
) -> bool:
    """Merge every stage, store results + metrics + the leaderboard entry, then running →
    finished.

    ``item`` is the submission's work item when the caller has read it already (the aggregate
    task reads it once at its start and passes it on); else it is read here. Returns False when
    the submission is no longer running (e.g. cancelled meanwhile); then no leaderboard entry
    remains.
    """
    submission = get_submission(session, submission_id)
    if submission.state != S.RUNNING:
        return False
    message = "results were stored by an earlier aggregate"
    if session.get(LeaderboardEntry, submission_id) is None:
        if item is None:
            item = get_work_item(session, submission_id, settings=settings)
        outcomes = {s.name: merge_stage(session, item, s, settings=settings)
                    for s in shards.stages_of(item)}  # fmt: skip
        message = "; ".join(o.message for o in outcomes.values())
        try:
            _store(session, submission_id, outcomes)
        except IntegrityError:
            session.rollback()
            if session.get(LeaderboardEntry, submission_id) is None:
                raise  # not the fence: some other constraint failed
            message = "results were stored by a concurrent aggregate"
    moved = transition(
        session,
        submission_id,
        from_states={S.RUNNING},
        to_state=S.FINISHED,
        reason=Reason.COMPLETED.value,
        message=message,
    )
    if not moved:
        if get_state(session, submission_id) != S.FINISHED:
            _drop_entry(session, submission_id)  # cancelled or failed meanwhile
    else:
        submission = get_submission(session, submission_id)
        submission.progress = 1.0
        session.commit()
    return moved


def _store(session: Session, submission_id: int, outcomes: dict[str, StageOutcome]) -> None:
    """Write every stage's results, the metric values, the entry and its read-model row
    (``models.boards.read_model``) in one transaction."""
    submission = get_submission(session, submission_id)
    if "certification" not in outcomes or not outcomes["certification"].results:
        raise InvalidTransitionError(f"submission {submission_id} has no results to rank")
    for table in (StageResult, MetricValue):
        session.execute(delete(table).where(table.submission_id == submission_id))
    version_ = evaluator_version()
    entry_figures: dict[str, float | int] = {}
    for stage_name, outcome in outcomes.items():
        for result in outcome.results:
            session.add(
                StageResult(
                    submission_id=submission_id,
                    stage=stage_name,
                    unit=result.unit,
                    evaluator_version=version_,
                    protocol=dict(result.protocol),
                    summary=dict(result.summary),
                    seeds=dict(result.seeds),
                    data_hashes=dict(result.data_hashes),
                    count=result.count,
                    seconds=result.seconds,
                    records_path=result.records_path,
                )
            )
        for key, value in outcome.metrics.items():
            session.add(
                MetricValue(
                    submission_id=submission_id,
                    benchmark_id=submission.benchmark_id,
                    stage=stage_name,
                    key=key,
                    value=None if value is None else float(value),
                )
            )
        entry_figures.update(outcome.entry)
    session.add(
        LeaderboardEntry(
            submission_id=submission_id,
            benchmark_id=submission.benchmark_id,
            protocol_version=submission.protocol_version,
            test_sets=int(entry_figures.get("test_sets", 0)),
            count=int(entry_figures.get("count", 0)),
            seconds=float(entry_figures.get("seconds", 0.0)),
        )
    )
    leaderboard_rows.refresh(session, [submission_id])
    session.commit()


def _drop_entry(session: Session, submission_id: int) -> None:
    for table in (LeaderboardEntry, MetricValue, LeaderboardFigures):
        session.execute(delete(table).where(table.submission_id == submission_id))
    session.commit()
