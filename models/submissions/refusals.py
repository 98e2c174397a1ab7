"""A per-user rate limit on refused uploads (issue 27 §2).

An upload the API refuses before storing anything (a manifest that does not validate, weights
that do not fit their architecture, swapped or oversized parts) creates no submission, so the
submission quotas never see it, yet each one costs a request body and a check. Each refusal is a
row of ``upload_refusals``; once a user has ``refused_uploads_per_window`` of them within the
last ``refused_uploads_window_seconds``, further uploads are refused with 429 and a
``Retry-After`` of the seconds until the oldest leaves the window. Rows older than the window are
deleted as refusals are recorded, so the table stays the size of the current windows.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from models.core.errors import QuotaExceededError
from models.core.settings import Settings
from models.db.base import utcnow
from models.db.entities import Role, UploadRefusal, User

#: The code of a 429 for too many refused uploads.
CODE = "too_many_refused_uploads"


def check(session: Session, user: User, *, settings: Settings, now: datetime | None = None) -> None:
    """Refuse (QuotaExceededError, 429 with ``retry_after``) a user who reached the limit."""
    limit = settings.refused_uploads_per_window
    if limit == 0 or user.role == Role.ADMIN:
        return
    now = now or utcnow()
    window = timedelta(seconds=settings.refused_uploads_window_seconds)
    recent = session.scalars(
        select(UploadRefusal.at)
        .where(UploadRefusal.user_id == user.id, UploadRefusal.at > now - window)
        .order_by(UploadRefusal.at.desc())
        .limit(limit)
    ).all()
    if len(recent) < limit:
        return
    retry_after = max(1, math.ceil((recent[-1] + window - now).total_seconds()))
    raise QuotaExceededError(
        f"{limit} of your uploads were refused in the last "
        f"{settings.refused_uploads_window_seconds} s (each refusal said what to fix); try again "
        f"in {retry_after} s, after checking the manifest and weights locally "
        "(certbench.nets.load_manifest / load_model)",
        code=CODE,
        retry_after=retry_after,
        details=[{"refused": len(recent), "limit": limit,
                  "window_seconds": settings.refused_uploads_window_seconds}],
    )  # fmt: skip


def record(
    session: Session, user: User, code: str, *, settings: Settings, now: datetime | None = None
) -> None:
    """Count one refused upload of ``user`` (committed at once: the refusal itself wrote
    nothing) and prune this user's rows that left the window."""
    if settings.refused_uploads_per_window == 0:
        return
    now = now or utcnow()
    session.rollback()  # whatever the refused intake left open
    session.execute(
        delete(UploadRefusal).where(
            UploadRefusal.user_id == user.id,
            UploadRefusal.at <= now - timedelta(seconds=settings.refused_uploads_window_seconds),
        )
    )
    session.add(UploadRefusal(user_id=user.id, at=now, code=code[:32]))
    session.commit()


def count(session: Session, user: User) -> int:
    """Refusals of ``user`` still stored (tests and diagnostics)."""
    return (
        session.scalar(
            select(func.count()).select_from(UploadRefusal).where(UploadRefusal.user_id == user.id)
        )
        or 0
    )
