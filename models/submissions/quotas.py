"""The submission quotas of a user over the last 24 hours and right now: submissions made,
submissions rejected or failed, and submissions waiting or running at once (the
``CERTBENCH_QUOTA_*`` settings). Duplicates cost no compute and are free; admins are exempt.
The compute (FLOP) quota's rules are ``models.submissions.compute_quota``.

:func:`decide` is the one quota decision on a new submission, every quota in one place: the
intake transaction takes it, authoritatively, once the user's row is locked
(``models.submissions.intake``). The same function, with ``before_upload=True``, refuses a user
who could not submit anything before an upload's body is read; that early call is a refusal only,
never a promise (issue 19 §2: a user over quota must not make the service read a 100 MB body).
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


def decide(
    session: Session,
    user: User,
    *,
    settings: Settings,
    flops: int | None = None,
    before_upload: bool = False,
    now: datetime | None = None,
) -> None:
    """Refuse a new submission of ``user`` that a quota does not allow; admins are exempt.

    The counts first (at once, per day, unsuccessful per day: QuotaExceededError, 429), then the
    compute quota (``models.submissions.compute_quota``): a submission estimated at ``flops``
    (its forward passes × its network's FLOPs per sample) is refused with 422 when the estimate
    alone exceeds the daily limit, with 429 when it does not fit what is left (None: not
    estimated, the compute quota is skipped).
    ``before_upload``: the early refusal, before an upload's body (and so its estimate) is known:
    the counts, and whether any compute is left at all.
    """
    if user.role == Role.ADMIN:
        return
    _check_counts(quota_usage(session, user, now=now), settings)
    if before_upload:
        compute_quota.check_room(session, user, settings=settings, now=now)
    elif flops is not None:
        compute_quota.check(session, user, flops, settings=settings, now=now)


def _check_counts(usage: QuotaUsage, settings: Settings) -> None:
    """Raise QuotaExceededError when one more submission would exceed a count quota."""
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
