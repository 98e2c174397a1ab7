"""Queries and actions on stored submissions: who may see one (``can_see`` and its SQL form
``visibility_filter``), a user's own list, the queue position, cancel, the admin's re-run and
moderation. Creating submissions is ``models.submissions.intake``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from models.core.errors import ConflictError, InvalidTransitionError, NotFoundError
from models.core.settings import Settings
from models.db.entities import Benchmark, Role, Submission, User
from models.db.states import (
    ACTIVE_STATES,
    NO_ENTRY_STATES,
    WAITING_STATES,
    Reason,
    SubmissionState,
)
from models.submissions.intake import find_original
from models.submissions.lifecycle import get_submission, reset_for_rerun, transition

S = SubmissionState


def can_see(submission: Submission, viewer: User | None) -> bool:
    """Owners and admins see everything of a submission; others only public, visible ones that
    are or may become an entry (a failed, rejected, cancelled or duplicate upload is the
    owner's business: its reason is on the owner's status page)."""
    if viewer is not None and (viewer.role == Role.ADMIN or viewer.id == submission.user_id):
        return True
    return (
        not submission.is_private
        and not submission.hidden
        and submission.state not in NO_ENTRY_STATES
    )


def get_visible(
    session: Session, submission_id: int, *, viewer: User | None, owner_only: bool = False
) -> Submission:
    """A submission the viewer may see (``owner_only``: status pages are for owner and admins).

    Raises NotFoundError otherwise: private submissions of others are indistinguishable from
    missing ones.
    """
    submission = session.get(Submission, submission_id)
    if submission is not None:
        if owner_only:
            allowed = viewer is not None and (
                viewer.role == Role.ADMIN or viewer.id == submission.user_id
            )
        else:
            allowed = can_see(submission, viewer)
        if allowed:
            return submission
    raise NotFoundError(f"submission {submission_id} does not exist or is not yours")


def visibility_filter(viewer: User | None) -> ColumnElement[bool]:
    """SQL condition matching ``can_see`` (used by leaderboard and list queries)."""
    public = and_(
        Submission.is_private.is_(False),
        Submission.hidden.is_(False),
        Submission.state.not_in(sorted(NO_ENTRY_STATES)),
    )
    if viewer is None:
        return public
    if viewer.role == Role.ADMIN:
        return Submission.id.is_not(None)
    return or_(public, Submission.user_id == viewer.id)


def list_for_user(
    session: Session,
    *,
    user: User,
    state: SubmissionState | None = None,
    offset: int = 0,
    limit: int = 50,
) -> tuple[int, list[Submission]]:
    """The user's own submissions, newest first, and their total count."""
    query: Select[Any] = select(Submission).where(Submission.user_id == user.id)
    if state is not None:
        query = query.where(Submission.state == state)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(query.order_by(Submission.id.desc()).offset(offset).limit(limit))
    return total, list(rows)


def queue_position(session: Session, submission: Submission) -> int | None:
    """1-based position among waiting submissions (None once it is running or done)."""
    if submission.state not in WAITING_STATES:
        return None
    ahead = session.scalar(
        select(func.count())
        .select_from(Submission)
        .where(Submission.state.in_(WAITING_STATES), Submission.id < submission.id)
    )
    return (ahead or 0) + 1


def cancel(session: Session, submission_id: int, *, by: User) -> Submission:
    """Cancel a waiting or running submission (owner or admin). Workers stop before the next
    shard. Raises NotFoundError, InvalidTransitionError (already finished/failed/...)."""
    submission = get_visible(session, submission_id, viewer=by, owner_only=True)
    by_admin = by.role == Role.ADMIN and by.id != submission.user_id
    moved = transition(
        session,
        submission_id,
        from_states=ACTIVE_STATES,
        to_state=S.CANCELLED,
        reason=(Reason.CANCELLED_BY_ADMIN if by_admin else Reason.CANCELLED_BY_USER).value,
        message=f"cancelled by {by.name}",
    )
    if not moved:
        state = get_submission(session, submission_id).state
        raise InvalidTransitionError(
            f"submission {submission_id} is {state}; only submitted, validating, queued or "
            "running submissions can be cancelled"
        )
    return get_submission(session, submission_id)


def rerun(session: Session, submission_id: int, *, fresh: bool, settings: Settings) -> Submission:
    """Admin re-run: back to ``submitted`` (the API then enqueues validation again).

    Raises NotFoundError, InvalidTransitionError (still active or a duplicate), StorageError
    (weights deleted after a rejection)."""
    submission = get_submission(session, submission_id)
    try:
        moved = reset_for_rerun(session, submission_id, fresh=fresh, settings=settings)
    except IntegrityError as err:
        session.rollback()
        original = find_original(session, submission.dedup_key)
        raise ConflictError(
            f"submission {submission_id} cannot be re-run: an identical submission "
            f"({original.id if original else 'another'}) is live or finished; its results apply",
            code="duplicate",
        ) from err
    if not moved:
        raise InvalidTransitionError(
            f"submission {submission_id} is {submission.state}; only finished, failed, rejected "
            "or cancelled submissions can be re-run"
        )
    return get_submission(session, submission_id)


def set_moderation(
    session: Session,
    submission_id: int,
    *,
    hidden: bool | None = None,
    flagged: bool | None = None,
    flag_reason: str | None = None,
    is_baseline: bool | None = None,
) -> Submission:
    """Admin moderation: hide an entry from the leaderboard, flag it with a reason, or mark it
    as a baseline. Raises NotFoundError."""
    submission = get_submission(session, submission_id)
    if hidden is not None:
        submission.hidden = hidden
    if flagged is not None:
        submission.flagged = flagged
        submission.flag_reason = flag_reason if flagged else None
    elif flag_reason is not None:
        submission.flag_reason = flag_reason
    if is_baseline is not None:
        submission.is_baseline = is_baseline
    session.commit()
    return submission


def get_benchmark_by_id(session: Session, benchmark_id: int) -> Benchmark:
    """Benchmark by id. Raises NotFoundError."""
    benchmark = session.get(Benchmark, benchmark_id)
    if benchmark is None:
        raise NotFoundError(f"benchmark {benchmark_id} does not exist")
    return benchmark
