"""The daily compute quota: how many forward passes a user may ask of the service per 24 hours.

A submission is charged its estimated work (``submissions.estimated_forward_passes``, stored at
intake from ``models.runs.estimates``) when it is made, so a user cannot queue a week of compute in
one afternoon; a cancelled or failed run is charged only the fraction it computed (its stored
progress), and what costs no compute is free: rejected uploads (refused at validation, before
any shard), duplicates, and runs the service could not queue. Admins are exempt.
``CERTBENCH_QUOTA_FORWARD_PASSES_PER_DAY`` sets the limit (``models.core.settings``).

Two refusals, both before anything is stored: a submission whose estimate alone exceeds the
limit can never run (422, ``estimate_exceeds_quota``); one that does not fit in what is left of
the window is refused with 429 (``quota_compute``) and a Retry-After of when enough of the
window's older charges expire. These are rules; the decision that applies them with the count
quotas is ``models.submissions.quotas.decide``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from models.core.errors import IntakeError, QuotaExceededError
from models.core.settings import Settings
from models.db.base import utcnow
from models.db.entities import Role, Submission, User
from models.db.states import Reason, SubmissionState

S = SubmissionState
#: The window every daily quota counts over (the submission counts' too).
QUOTA_WINDOW = timedelta(days=1)
FREE_STATES = frozenset({S.REJECTED, S.DUPLICATE})
PARTIAL_STATES = frozenset({S.CANCELLED, S.FAILED})


@dataclass(frozen=True)
class ComputeUsage:
    """Forward passes charged in the window, and each charge with its time (oldest first)."""

    used: int
    limit: int
    charges: tuple[tuple[datetime, int], ...]

    @property
    def left(self) -> int:
        return max(0, self.limit - self.used)


def charge(submission: Submission) -> int:
    """What one submission counts against the quota (see the module docstring)."""
    estimate = submission.estimated_forward_passes or 0
    if submission.state in FREE_STATES:
        return 0
    if submission.state == S.FAILED and submission.reason == Reason.QUEUE_UNAVAILABLE:
        return 0
    if submission.state in PARTIAL_STATES:
        return math.ceil(estimate * min(1.0, max(0.0, submission.progress)))
    return estimate


def usage(
    session: Session, user: User, *, settings: Settings, now: datetime | None = None
) -> ComputeUsage:
    """The user's charges over the last 24 hours."""
    since = (now or utcnow()) - QUOTA_WINDOW
    rows = session.scalars(
        select(Submission)
        .where(Submission.user_id == user.id, Submission.created_at >= since)
        .order_by(Submission.created_at, Submission.id)
    ).all()
    charges = tuple((row.created_at, cost) for row in rows if (cost := charge(row)) > 0)
    return ComputeUsage(
        used=sum(cost for _, cost in charges),
        limit=settings.quota_forward_passes_per_day,
        charges=charges,
    )


def check_room(
    session: Session, user: User, *, settings: Settings, now: datetime | None = None
) -> None:
    """Refuse (429) a user whose quota is already used up: the early refusal, before an upload's
    body and so its estimate are known (``models.submissions.quotas.decide``)."""
    if user.role == Role.ADMIN:
        return
    now = now or utcnow()
    current = usage(session, user, settings=settings, now=now)
    if current.left <= 0:
        _refuse(current, 1, now=now)


def check_size(user: User, forward_passes: int, *, settings: Settings) -> None:
    """Refuse (422) a submission whose estimate alone exceeds the daily limit: it can never run,
    whatever the user's usage (nothing is stored: the intake transaction rolls back)."""
    limit = settings.quota_forward_passes_per_day
    if user.role != Role.ADMIN and forward_passes > limit:
        raise IntakeError(
            f"this submission is estimated at {forward_passes:,} forward passes, more than the "
            f"daily compute quota of {limit:,} (CERTBENCH_QUOTA_FORWARD_PASSES_PER_DAY) allows "
            "any single submission; it can never run here: ask an operator to raise the quota "
            "or to run it",
            code="estimate_exceeds_quota",
        )


def check(
    session: Session,
    user: User,
    forward_passes: int,
    *,
    settings: Settings,
    now: datetime | None = None,
) -> None:
    """Refuse a submission estimated at ``forward_passes``: 422 when it exceeds the limit on its
    own, 429 (with when to retry) when it does not fit in what the window has left. Called in
    the intake transaction, after the user's row is locked and duplicates (free) are found."""
    if user.role == Role.ADMIN:
        return
    check_size(user, forward_passes, settings=settings)
    limit = settings.quota_forward_passes_per_day
    now = now or utcnow()
    current = usage(session, user, settings=settings, now=now)
    if current.used + forward_passes > limit:
        _refuse(current, forward_passes, now=now)


def _refuse(current: ComputeUsage, forward_passes: int, *, now: datetime) -> None:
    """Raise the 429: the numbers, and when enough older charges leave the window."""
    needed = current.used + forward_passes - current.limit
    freed, retry_at = 0, now + QUOTA_WINDOW
    for made, cost in current.charges:
        freed += cost
        if freed >= needed:
            retry_at = made + QUOTA_WINDOW
            break
    retry_after = max(1, math.ceil((retry_at - now).total_seconds()))
    raise QuotaExceededError(
        f"this submission needs {forward_passes:,} forward passes but only {current.left:,} of "
        f"your daily compute quota of {current.limit:,} are left ({current.used:,} used by "
        f"your submissions of the last 24 hours); it fits in {retry_after:,} s, or cancel a "
        "waiting submission",
        code="quota_compute",
        retry_after=retry_after,
        details=[
            {
                "forward_passes": forward_passes,
                "used": current.used,
                "limit": current.limit,
                "left": current.left,
                "retry_after_seconds": retry_after,
            }
        ],
    )
