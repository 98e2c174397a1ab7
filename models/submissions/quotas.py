"""The submission quotas of a user over the last 24 hours and right now: submissions made,
submissions rejected or failed, and submissions waiting or running at once (the
``CERTBENCH_QUOTA_*`` settings). Duplicates cost no compute and are free; admins are exempt.
The forward-pass quota is ``models.submissions.compute_quota``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models.core.errors import QuotaExceededError
from models.core.settings import Settings
from models.db.base import utcnow
from models.db.entities import Role, Submission, User
from models.db.states import ACTIVE_STATES, UNSUCCESSFUL_STATES, Reason, SubmissionState
from models.submissions import compute_quota

S = SubmissionState
QUOTA_WINDOW = compute_quota.QUOTA_WINDOW


@dataclass(frozen=True)
class QuotaUsage:
    """A user's usage over the last 24 hours and right now."""

    submissions_today: int
    unsuccessful_today: int
    active: int


def quota_usage(session: Session, user: User, *, now: datetime | None = None) -> QuotaUsage:
    """Counts the quotas are checked against (duplicates are free: they cost no compute)."""
    since = (now or utcnow()) - QUOTA_WINDOW
    rows = session.execute(
        select(Submission.state, func.count())
        .where(Submission.user_id == user.id, Submission.created_at >= since)
        .group_by(Submission.state)
    ).all()
    by_state = {state: count for state, count in rows}
    active = session.scalar(
        select(func.count())
        .select_from(Submission)
        .where(Submission.user_id == user.id, Submission.state.in_(ACTIVE_STATES))
    )
    # A run the service could not queue (its broker was down) is not the submitter's failure.
    not_theirs = session.scalar(
        select(func.count())
        .select_from(Submission)
        .where(
            Submission.user_id == user.id,
            Submission.created_at >= since,
            Submission.state == S.FAILED,
            Submission.reason == Reason.QUEUE_UNAVAILABLE.value,
        )
    )
    unsuccessful = sum(by_state.get(s, 0) for s in UNSUCCESSFUL_STATES) - (not_theirs or 0)
    free = UNSUCCESSFUL_STATES | {S.DUPLICATE}
    counted = sum(c for s, c in by_state.items() if s not in free)
    return QuotaUsage(
        submissions_today=counted, unsuccessful_today=unsuccessful, active=active or 0
    )


def check_quotas(session: Session, user: User, *, settings: Settings) -> None:
    """Raise QuotaExceededError when a new submission would exceed a quota (admins are exempt)."""
    if user.role == Role.ADMIN:
        return
    usage = quota_usage(session, user)
    if usage.active >= settings.quota_concurrent:
        raise QuotaExceededError(
            f"you have {usage.active} submission(s) waiting or running; the limit is "
            f"{settings.quota_concurrent} at a time: wait for one to finish or cancel one",
            code="quota_concurrent",
        )
    if usage.submissions_today >= settings.quota_submissions_per_day:
        raise QuotaExceededError(
            f"you made {usage.submissions_today} submissions in the last 24 hours; the limit is "
            f"{settings.quota_submissions_per_day}: try again later",
            code="quota_daily",
        )
    if usage.unsuccessful_today >= settings.quota_failed_per_day:
        raise QuotaExceededError(
            f"{usage.unsuccessful_today} of your submissions were rejected or failed in the last "
            f"24 hours (limit {settings.quota_failed_per_day}); check the reasons with "
            "GET /api/v1/submissions before submitting again",
            code="quota_unsuccessful",
        )
