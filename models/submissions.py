"""Submission intake and queries: dedup, quotas, storage of the artifact, visibility, cancel.

The API's cheap checks (size caps, safetensors header, manifest schema) run before these
functions; ``create_submission`` is where an upload becomes rows + one weights file, all or
nothing: the file is put in place inside the transaction and removed again if it fails.

Quotas and dedup hold under concurrency because the database enforces them: an intake first
locks its user's row (so one user's uploads are counted one at a time) and the weights' row
(``models.artifacts.lock``: identical uploads of several users are serialised, the later ones
see the first and become duplicates), and a partial unique index allows one live original per
dedup key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from models import artifacts, compute_quota, run_seeds
from models.base import utcnow
from models.entities import Artifact, Benchmark, Role, Submission, SubmissionEvent, User
from models.errors import (
    ConflictError,
    InvalidTransitionError,
    NotFoundError,
    QuotaExceededError,
)
from models.pipeline import get_submission, reset_for_rerun, transition
from models.settings import Settings
from models.states import (
    ACTIVE_STATES,
    DEDUP_STATES,
    NO_ENTRY_STATES,
    UNSUCCESSFUL_STATES,
    WAITING_STATES,
    Reason,
    SubmissionState,
)

S = SubmissionState
QUOTA_WINDOW = compute_quota.QUOTA_WINDOW


#: Attempts of an intake that lost a dedup race to a concurrent identical one (the next attempt
#: finds that one and records a duplicate).
INTAKE_ATTEMPTS = 3


@dataclass(frozen=True)
class StagedWeights:
    """Weights already streamed to a file under the artifacts dir, hashed on the way."""

    path: Path
    sha256: str
    size: int


@dataclass(frozen=True)
class Upload:
    """An upload that passed the cheap checks: the weights (bytes, or a staged file that
    ``create_submission`` moves into place), the parsed manifest and its facts."""

    weights: bytes
    manifest: dict[str, Any]
    model_name: str
    architecture: str
    sigma: float
    is_private: bool = False
    extra_data: bool = False
    venue: str | None = None
    staged: StagedWeights | None = None
    weights_public: bool = False
    weights_license: str | None = None
    is_baseline: bool = False
    """A reference entry the service submits itself (``api.services.reference_entries``)."""

    @property
    def weights_sha256(self) -> str:
        if self.staged is not None:
            return self.staged.sha256
        return hashlib.sha256(self.weights).hexdigest()

    @property
    def weights_size(self) -> int:
        return self.staged.size if self.staged is not None else len(self.weights)

    @property
    def manifest_sha256(self) -> str:
        return manifest_sha256(self.manifest)


def manifest_sha256(manifest: dict[str, Any]) -> str:
    """Hash of the canonical JSON form of a manifest (key order and spacing do not matter)."""
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def dedup_key(weights_sha256: str, manifest_hash: str, protocol_version: str) -> str:
    """Identity of a certification job: same weights + manifest + protocol = same results."""
    identity = f"{weights_sha256}:{manifest_hash}:{protocol_version}"
    return hashlib.sha256(identity.encode()).hexdigest()


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


def find_original(session: Session, key: str) -> Submission | None:
    """The oldest live or finished submission with this dedup key, if any."""
    return session.scalar(
        select(Submission)
        .where(Submission.dedup_key == key, Submission.state.in_(DEDUP_STATES))
        .order_by(Submission.id)
        .limit(1)
    )


def create_submission(
    session: Session,
    *,
    user: User,
    benchmark: Benchmark,
    upload: Upload,
    settings: Settings,
    forward_passes: int | None = None,
) -> Submission:
    """Store an upload and create its submission (state ``submitted``), or a ``duplicate`` row
    pointing at the existing identical submission (no file written, no quota used).

    ``forward_passes``: its estimated work (``models.estimates``), checked against the daily
    compute quota and stored; None skips that quota (tests that do not estimate).
    Safe under concurrency (see the module docstring). Raises QuotaExceededError (or
    IntakeError for an estimate beyond the compute quota) before anything is stored.
    """
    key = dedup_key(upload.weights_sha256, upload.manifest_sha256, benchmark.protocol_version)
    for attempt in range(INTAKE_ATTEMPTS):
        try:
            return _create_once(session, user=user, benchmark=benchmark, upload=upload, key=key,
                                settings=settings, forward_passes=forward_passes)  # fmt: skip
        except IntegrityError:
            # A concurrent identical original committed between our lookup and our insert; the
            # next attempt finds it. (``_create_once`` already rolled back and cleaned up.)
            if attempt + 1 == INTAKE_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _create_once(
    session: Session,
    *,
    user: User,
    benchmark: Benchmark,
    upload: Upload,
    key: str,
    settings: Settings,
    forward_passes: int | None,
) -> Submission:
    written: Path | None = None
    try:
        lock_user(session, user.id)
        artifacts.lock(session, upload.weights_sha256, size_bytes=upload.weights_size)
        original = find_original(session, key)
        if original is not None:
            return _create_duplicate(session, user=user, original=original, upload=upload, key=key)
        check_quotas(session, user, settings=settings)
        if forward_passes is not None:
            compute_quota.check(session, user, forward_passes, settings=settings)
        artifact, written = _store_artifact(session, upload, settings=settings)
        submission = Submission(
            user_id=user.id,
            benchmark_id=benchmark.id,
            artifact_id=artifact.id,
            state=S.SUBMITTED,
            message="waiting for validation",
            is_private=upload.is_private,
            model_name=upload.model_name,
            architecture=upload.architecture,
            sigma=upload.sigma,
            extra_data=upload.extra_data,
            venue=upload.venue,
            weights_public=upload.weights_public,
            weights_license=upload.weights_license,
            protocol_version=benchmark.protocol_version,
            dedup_key=key,
            is_baseline=upload.is_baseline,
            estimated_forward_passes=forward_passes,
        )
        session.add(submission)
        session.flush()
        run_seeds.draw(session, submission.id)  # the run's secret noise seed, committed
        session.add(
            SubmissionEvent(submission_id=submission.id, to_state=S.SUBMITTED, message="uploaded")
        )
        session.commit()
    except BaseException:
        artifacts.discard(session, written)
        raise
    return submission


def lock_user(session: Session, user_id: int) -> None:
    """Hold the user's row until the transaction ends, so this user's intakes are counted
    against the quotas one at a time. A no-op UPDATE: a row lock on PostgreSQL, the database
    write lock on SQLite (where SELECT ... FOR UPDATE does not exist)."""
    session.execute(
        update(User)
        .where(User.id == user_id)
        .values(id=User.id)
        .execution_options(synchronize_session=False)
    )


def _create_duplicate(
    session: Session, *, user: User, original: Submission, upload: Upload, key: str
) -> Submission:
    message = (
        f"identical to submission {original.id} (same weights, manifest and protocol "
        f"{original.protocol_version}); its results apply"
        if original.user_id == user.id or not original.is_private
        else "identical to an existing private submission (same weights, manifest and protocol)"
    )
    duplicate = Submission(
        user_id=user.id,
        benchmark_id=original.benchmark_id,
        artifact_id=original.artifact_id,
        state=S.DUPLICATE,
        reason=Reason.DUPLICATE.value,
        message=message,
        is_private=upload.is_private,
        model_name=upload.model_name,
        architecture=upload.architecture,
        sigma=upload.sigma,
        extra_data=upload.extra_data,
        venue=upload.venue,
        weights_public=upload.weights_public,
        weights_license=upload.weights_license,
        protocol_version=original.protocol_version,
        dedup_key=key,
        duplicate_of_id=original.id,
        finished_at=utcnow(),
    )
    session.add(duplicate)
    session.flush()
    session.add(
        SubmissionEvent(
            submission_id=duplicate.id,
            to_state=S.DUPLICATE,
            reason=Reason.DUPLICATE.value,
            message=message,
        )
    )
    session.commit()
    return duplicate


def _store_artifact(
    session: Session, upload: Upload, *, settings: Settings
) -> tuple[Artifact, Path | None]:
    """Find or create the artifact row and make sure its weights file exists (the weights' row is
    locked by the caller). Returns (artifact, path written by this call or None) so the caller
    can undo the write."""
    sha, msha = upload.weights_sha256, upload.manifest_sha256
    relpath, written = artifacts.store(
        session,
        sha256=sha,
        size_bytes=upload.weights_size,
        settings=settings,
        data=None if upload.staged is not None else upload.weights,
        staged=upload.staged.path if upload.staged is not None else None,
    )
    artifact = session.scalar(
        select(Artifact).where(Artifact.sha256 == sha, Artifact.manifest_sha256 == msha)
    )
    if artifact is None:
        artifact = Artifact(
            sha256=sha,
            size_bytes=upload.weights_size,
            manifest=upload.manifest,
            manifest_sha256=msha,
            weights_path=relpath,
        )
        session.add(artifact)
    else:
        artifact.weights_path = relpath
    session.flush()
    return artifact, written


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
