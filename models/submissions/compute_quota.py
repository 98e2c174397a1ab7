"""The daily compute quota: how many FLOPs of work a user may ask of the service per 24 hours.

A submission is charged its estimated work in FLOPs: its estimated forward passes
(``submissions.estimated_forward_passes``, from ``models.runs.estimates`` at intake) times its
network's FLOPs per noise sample (``submissions.flops_per_sample``, counted on the ``meta``
device by ``certbench.nets.cost``), the same two figures the intake ETA scales this fleet's
measured FLOP rate by (``models.runs.estimates.for_network``) and the leaderboard's cost per
certified image multiplies. A denoised-smoothing entry (a U-Net in front of its classifier) is
charged for both networks, so a heavier network uses more of the quota, as it uses more of the
fleet. The attacks' backward passes are counted by neither the estimate nor the charge.

It is charged when the submission is made, so a user cannot queue a week of compute in one
afternoon; a cancelled or failed run is charged only the fraction it computed (its stored
progress), and what costs no compute is free: rejected uploads (refused at validation, before
any shard), duplicates, and runs the service could not queue. Admins are exempt.
``CERTBENCH_QUOTA_FLOPS_PER_DAY`` sets the limit (``models.core.settings``).

Two refusals, both before anything is stored: a submission whose estimate alone exceeds the
limit can never run (422, ``estimate_exceeds_quota``); one that does not fit in what is left of
the window is refused with 429 (``quota_compute``) and a Retry-After of when enough of the
window's older charges expire. These are rules; the decision that applies them with the count
quotas is ``models.submissions.quotas.decide``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

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
    """FLOPs charged in the window, and each charge with its time (oldest first);
    ``forward_passes``: the same charges in forward passes, for the user's information."""

    used: int
    limit: int
    charges: tuple[tuple[datetime, int], ...]
    forward_passes: int = 0

    @property
    def left(self) -> int:
        return max(0, self.limit - self.used)


def network_flops(manifest: Mapping[str, Any]) -> int:
    """FLOPs per noise sample of ``manifest``'s network (denoiser included), counted on the
    ``meta`` device (``certbench.nets.manifest_cost``, cached per manifest). Raises the
    ``certbench.errors.ModelLoadError`` of a network that cannot be built."""
    from certbench.nets import load_manifest, manifest_cost

    return manifest_cost(load_manifest(dict(manifest))).flops_per_sample


def flops_per_sample(submission: Submission) -> int:
    """The submission's FLOPs per noise sample: as intake stored them, or, for a submission
    made before intake counted FLOPs (migration 0015), counted now from its manifest (those
    name built-in architectures only, which always build: library networks came with 0015)."""
    if submission.flops_per_sample is not None:
        return submission.flops_per_sample
    return network_flops(submission.artifact.manifest)


def _charged_fraction(submission: Submission) -> float:
    """The part of its estimate a submission is charged (module docstring)."""
    if submission.state in FREE_STATES:
        return 0.0
    if submission.state == S.FAILED and submission.reason == Reason.QUEUE_UNAVAILABLE:
        return 0.0
    if submission.state in PARTIAL_STATES:
        return min(1.0, max(0.0, submission.progress))
    return 1.0


def charged_passes(submission: Submission) -> int:
    """The forward passes one submission is charged for."""
    fraction = _charged_fraction(submission)
    return math.ceil((submission.estimated_forward_passes or 0) * fraction) if fraction else 0


def charge(submission: Submission) -> int:
    """The FLOPs one submission counts against the quota (see the module docstring)."""
    passes = charged_passes(submission)
    return passes * flops_per_sample(submission) if passes else 0


def usage(
    session: Session, user: User, *, settings: Settings, now: datetime | None = None
) -> ComputeUsage:
    """The user's charges over the last 24 hours."""
    since = (now or utcnow()) - QUOTA_WINDOW
    rows = session.scalars(
        select(Submission)
        .where(Submission.user_id == user.id, Submission.created_at >= since)
        .order_by(Submission.created_at, Submission.id)
        .options(selectinload(Submission.artifact))
    ).all()
    charges = tuple((row.created_at, cost) for row in rows if (cost := charge(row)) > 0)
    return ComputeUsage(
        used=sum(cost for _, cost in charges),
        limit=settings.quota_flops_per_day,
        charges=charges,
        forward_passes=sum(charged_passes(row) for row in rows),
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


def check_size(user: User, flops: int, *, settings: Settings) -> None:
    """Refuse (422) a submission whose estimate alone exceeds the daily limit: it can never run,
    whatever the user's usage (nothing is stored: the intake transaction rolls back)."""
    limit = settings.quota_flops_per_day
    if user.role != Role.ADMIN and flops > limit:
        raise IntakeError(
            f"this submission is estimated at {flops:.4g} FLOPs, more than the daily compute "
            f"quota of {limit:.4g} FLOPs (CERTBENCH_QUOTA_FLOPS_PER_DAY) allows any single "
            "submission; it can never run here: submit a smaller network, or ask an operator "
            "to raise the quota or to run it",
            code="estimate_exceeds_quota",
        )


def check(
    session: Session,
    user: User,
    flops: int,
    *,
    settings: Settings,
    now: datetime | None = None,
) -> None:
    """Refuse a submission estimated at ``flops``: 422 when it exceeds the limit on its own,
    429 (with when to retry) when it does not fit in what the window has left. Called in the
    intake transaction, after the user's row is locked and duplicates (free) are found."""
    if user.role == Role.ADMIN:
        return
    check_size(user, flops, settings=settings)
    now = now or utcnow()
    current = usage(session, user, settings=settings, now=now)
    if current.used + flops > current.limit:
        _refuse(current, flops, now=now)


def _refuse(current: ComputeUsage, flops: int, *, now: datetime) -> None:
    """Raise the 429: the numbers, and when enough older charges leave the window."""
    needed = current.used + flops - current.limit
    freed, retry_at = 0, now + QUOTA_WINDOW
    for made, cost in current.charges:
        freed += cost
        if freed >= needed:
            retry_at = made + QUOTA_WINDOW
            break
    retry_after = max(1, math.ceil((retry_at - now).total_seconds()))
    raise QuotaExceededError(
        f"this submission needs {flops:.4g} FLOPs but only {current.left:.4g} of your daily "
        f"compute quota of {current.limit:.4g} FLOPs are left ({current.used:.4g} used by your "
        f"submissions of the last 24 hours); it fits in {retry_after:,} s, or cancel a waiting "
        "submission",
        code="quota_compute",
        retry_after=retry_after,
        details=[
            {
                "flops": flops,
                "used": current.used,
                "limit": current.limit,
                "left": current.left,
                "retry_after_seconds": retry_after,
            }
        ],
    )
