"""A submission's life cycle: states, leases, failure, rejection and reruns.

Workers pass submission ids, never ORM objects; every function re-reads what it needs and commits
its own unit of work. State changes go through ``transition``: a compare-and-set UPDATE guarded by
``TRANSITIONS``, so a cancel by the user and a worker finishing never both win. What the stages
compute is planned and recorded in ``models.runs.shards`` and stored in ``models.runs.results``;
nothing here knows a stage by name.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from models.core.errors import InvalidTransitionError, NotFoundError, ServiceUnavailableError
from models.core.settings import Settings
from models.db.base import utcnow
from models.db.engine import rows_matched
from models.db.entities import (
    LeaderboardEntry,
    LeaderboardFigures,
    MetricValue,
    ShardDispatch,
    StageResult,
    StageShard,
    Submission,
    SubmissionEvent,
)
from models.db.states import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    TRANSITIONS,
    Reason,
    SubmissionState,
    can_transition,
)
from models.submissions import artifacts, run_seeds, storage

S = SubmissionState
#: States that hold a worker lease (the watchdog fails them when it expires).
LEASED_STATES = frozenset({S.VALIDATING, S.RUNNING})


def get_submission(session: Session, submission_id: int) -> Submission:
    """The submission row. Raises NotFoundError."""
    submission = session.get(Submission, submission_id)
    if submission is None:
        raise NotFoundError(f"submission {submission_id} does not exist")
    return submission


def get_state(session: Session, submission_id: int) -> SubmissionState:
    """Current state, read fresh from the database (not from the session's identity map)."""
    state = session.execute(
        select(Submission.state).where(Submission.id == submission_id)
    ).scalar_one_or_none()
    if state is None:
        raise NotFoundError(f"submission {submission_id} does not exist")
    return state


def transition(
    session: Session,
    submission_id: int,
    *,
    from_states: Iterable[SubmissionState],
    to_state: SubmissionState,
    reason: str | None = None,
    message: str = "",
    worker: str | None = None,
    settings: Settings | None = None,
    commit: bool = True,
) -> bool:
    """Move a submission to ``to_state`` iff it is currently in one of ``from_states``.

    Returns False (and changes nothing) when the state moved meanwhile, e.g. the user cancelled;
    callers then stop quietly. Raises InvalidTransitionError when a listed move is illegal (a bug
    in the caller, not a race). Entering validating/running starts a lease of
    ``settings.lease_seconds`` (``settings`` required then); terminal states set ``finished_at``.
    With ``commit=False`` the move is only flushed, for a caller that must finish more work in
    the same transaction before anyone sees the new state (``reject``).
    """
    sources = frozenset(from_states)
    illegal = sorted(str(s) for s in sources if not can_transition(s, to_state))
    if illegal or not sources:
        raise InvalidTransitionError(
            f"cannot move a submission from {illegal or 'no state'} to {to_state}; legal targets: "
            + "; ".join(f"{s} → {sorted(map(str, TRANSITIONS[s]))}" for s in sorted(sources))
        )
    now = utcnow()
    values: dict[str, Any] = {
        "state": to_state,
        "reason": reason,
        "message": message,
        "updated_at": now,
    }
    if worker is not None:
        values["worker"] = worker
    if to_state in LEASED_STATES:
        if settings is None:
            raise InvalidTransitionError(f"entering {to_state} starts a lease: pass settings=")
        values["heartbeat_at"] = now
        values["lease_expires_at"] = now + timedelta(seconds=settings.lease_seconds)
    else:
        values["lease_expires_at"] = None
    if to_state == S.RUNNING:
        values["started_at"] = func.coalesce(Submission.started_at, now)
    if to_state in TERMINAL_STATES:
        values["finished_at"] = now
    if to_state == S.SUBMITTED:
        values.update(finished_at=None, started_at=None, heartbeat_at=None, worker=None)
        values["attempt"] = Submission.attempt + 1
    old_state = get_state(session, submission_id)
    matched = rows_matched(
        session,
        update(Submission)
        .where(Submission.id == submission_id, Submission.state.in_(sources))
        .values(**values)
        .execution_options(synchronize_session=False),
    )
    if matched != 1:
        session.rollback()
        return False
    session.add(
        SubmissionEvent(
            submission_id=submission_id,
            at=now,
            from_state=old_state if old_state in sources else None,
            to_state=to_state,
            reason=reason,
            message=message,
        )
    )
    if not commit:
        session.flush()
        return True
    session.commit()
    session.expire_all()
    return True


def heartbeat(
    session: Session, submission_id: int, *, settings: Settings, worker: str | None = None
) -> bool:
    """Renew the lease of a validating/running submission.

    Returns False when the submission is no longer leased (cancelled, failed by the watchdog,
    finished): the caller must stop working on it. This is also the cancel check between shards.
    """
    now = utcnow()
    values: dict[str, Any] = {
        "heartbeat_at": now,
        "lease_expires_at": now + timedelta(seconds=settings.lease_seconds),
    }
    if worker is not None:
        values["worker"] = worker
    matched = rows_matched(
        session,
        update(Submission)
        .where(Submission.id == submission_id, Submission.state.in_(LEASED_STATES))
        .values(**values)
        .execution_options(synchronize_session=False),
    )
    session.commit()
    return matched == 1


def set_shards_total(session: Session, submission_id: int, total: int) -> None:
    """Store how many shards the run's plan has (``models.runs.shards``), if that changed;
    commits then."""
    submission = get_submission(session, submission_id)
    if submission.shards_total != total:
        submission.shards_total = total
        session.commit()


def should_continue(session: Session, submission_id: int) -> bool:
    """True while the submission still wants work (not cancelled, failed or finished)."""
    return get_state(session, submission_id) in ACTIVE_STATES


def is_cancelled(session: Session, submission_id: int) -> bool:
    """True once the owner or an admin cancelled the submission."""
    return get_state(session, submission_id) == S.CANCELLED


def fail(session: Session, submission_id: int, *, reason: str, message: str) -> bool:
    """Mark an active submission failed (infrastructure/runtime trouble). False if not active."""
    return transition(
        session,
        submission_id,
        from_states=ACTIVE_STATES,
        to_state=S.FAILED,
        reason=reason,
        message=message,
    )


def queue_or_fail(session: Session, submission_id: int, enqueue: Callable[[int], object]) -> None:
    """Hand a submitted run to ``enqueue`` (the API's ``JobQueue.enqueue_validation``); if the
    broker is down, mark it failed (``queue_unavailable``, which counts against no quota:
    ``models.submissions.quotas``) and raise ServiceUnavailableError naming it."""
    try:
        enqueue(submission_id)
    except ServiceUnavailableError as err:
        fail(
            session,
            submission_id,
            reason=Reason.QUEUE_UNAVAILABLE.value,
            message=f"could not queue validation: {err}",
        )
        raise ServiceUnavailableError(
            f"{err}. Submission {submission_id} was recorded as failed (queue_unavailable, "
            "which counts against no quota); try again later",
            submission_id=submission_id,
        ) from err


def reject(
    session: Session, submission_id: int, *, reason: str, message: str, settings: Settings
) -> bool:
    """Reject an unusable upload and delete its stored weights (unless a submission of any
    artifact sharing the file may still need it). False if the submission was no longer
    submitted/validating.

    One transaction: the state moves, the file goes, then both commit, so nobody can see a
    rejected submission whose weights are still on disk (CI once read the state between the two
    and found the file).
    """
    artifact_id = get_submission(session, submission_id).artifact_id
    moved = transition(
        session,
        submission_id,
        from_states={S.SUBMITTED, S.VALIDATING},
        to_state=S.REJECTED,
        reason=reason,
        message=message,
        commit=False,
    )
    if moved:
        release_artifact(session, artifact_id, settings=settings)  # commits the move with it
    return moved


def release_artifact(session: Session, artifact_id: int, *, settings: Settings) -> bool:
    """Delete an artifact's weights file when no submission that may still need it references it,
    counting every artifact that shares the file
    (``models.submissions.artifacts.release_artifact``).

    Returns True when the file was deleted. The metadata row stays (sha256, size, manifest).
    """
    return artifacts.release_artifact(session, artifact_id, settings=settings)


def reset_for_rerun(
    session: Session, submission_id: int, *, fresh: bool, settings: Settings, message: str = ""
) -> bool:
    """Send a finished/failed/rejected/cancelled submission back to ``submitted``.

    ``fresh`` drops recorded shards, results and the leaderboard entry (and their files);
    otherwise finished shards are kept and the run resumes. False if the state did not allow it.
    The rerun gets a fresh secret noise seed unless it resumes recorded shards, which keep the
    seed they were computed with (``models.submissions.run_seeds``).
    """
    artifact = get_submission(session, submission_id).artifact
    if artifact.weights_path is None:
        raise InvalidTransitionError(
            f"submission {submission_id} cannot be re-run: its weights were deleted when it was "
            "rejected; the submitter has to upload them again",
            code="weights_deleted",
        )
    moved = transition(
        session,
        submission_id,
        from_states={S.FINISHED, S.FAILED, S.REJECTED, S.CANCELLED},
        to_state=S.SUBMITTED,
        reason=Reason.RERUN.value,
        message=message or "re-run requested by an admin",
    )
    if not moved:
        return False
    for table in (LeaderboardEntry, LeaderboardFigures, MetricValue, StageResult, ShardDispatch):
        session.execute(delete(table).where(table.submission_id == submission_id))
    if fresh:
        session.execute(delete(StageShard).where(StageShard.submission_id == submission_id))
        folder = storage.resolve(
            settings.artifacts_dir, storage.submission_records_dir(submission_id)
        )
        _remove_tree(folder)
    run_seeds.redraw_for_rerun(session, submission_id)
    submission = get_submission(session, submission_id)
    submission.progress = 0.0 if fresh else submission.progress
    submission.shards_done = 0 if fresh else submission.shards_done
    session.commit()
    return True


def _remove_tree(folder: Path) -> None:
    if folder.exists():
        shutil.rmtree(folder)
