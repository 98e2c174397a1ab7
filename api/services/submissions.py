"""Submitting, reading, cancelling and re-running submissions (REST and web share these)."""

from __future__ import annotations

from typing import BinaryIO

from sqlalchemy.orm import Session

from api.queue import JobQueue
from api.schemas import QuotaPublic, SubmissionList, SubmissionPublic, TestSetProgress
from api.services.intake import build_upload, read_capped
from models import run_seeds
from models import submissions as crud
from models.entities import Submission, User
from models.errors import ServiceUnavailableError
from models.pipeline import fail
from models.settings import Settings
from models.shards import recorded
from models.states import Reason, SubmissionState


def submit(
    session: Session,
    queue: JobQueue,
    *,
    user: User,
    weights: BinaryIO,
    manifest: BinaryIO,
    settings: Settings,
    is_private: bool = False,
    extra_data: bool = False,
    venue: str | None = None,
) -> Submission:
    """Check, store and enqueue an upload. Returns the new submission, or a ``duplicate`` row.

    Raises IntakeError/PayloadTooLargeError (nothing stored), QuotaExceededError, and
    ServiceUnavailableError when the queue is down (the submission is then marked failed).
    """
    manifest_bytes = read_capped(manifest, limit=settings.max_manifest_bytes, part="manifest")
    weights_bytes = read_capped(weights, limit=settings.max_weights_bytes, part="weights")
    benchmark, upload = build_upload(
        session,
        weights=weights_bytes,
        manifest_bytes=manifest_bytes,
        settings=settings,
        is_private=is_private,
        extra_data=extra_data,
        venue=venue,
    )
    submission = crud.create_submission(
        session, user=user, benchmark=benchmark, upload=upload, settings=settings
    )
    if submission.state == SubmissionState.SUBMITTED:
        _enqueue(session, queue, submission.id)
    return submission


def _enqueue(session: Session, queue: JobQueue, submission_id: int) -> None:
    try:
        queue.enqueue_validation(submission_id)
    except ServiceUnavailableError as err:
        fail(
            session,
            submission_id,
            reason=Reason.QUEUE_UNAVAILABLE.value,
            message=f"could not queue validation: {err}",
        )
        raise


def public(session: Session, submission: Submission, *, events: bool = False) -> SubmissionPublic:
    """Public shape with the live queue position."""
    return SubmissionPublic.of(
        submission,
        queue_position=crud.queue_position(session, submission),
        with_events=events,
        seed=run_seeds.view(session, submission),
    )


def status(session: Session, submission_id: int, *, viewer: User) -> SubmissionPublic:
    """State, reason, progress and queue position (owner and admins only)."""
    submission = crud.get_visible(session, submission_id, viewer=viewer, owner_only=True)
    return public(session, submission, events=True)


def progress_by_test_set(
    session: Session, submission_id: int, *, viewer: User
) -> list[TestSetProgress]:
    """Images certified so far per test set, from the recorded shards (owner and admins)."""
    submission = crud.get_visible(session, submission_id, viewer=viewer, owner_only=True)
    done: dict[str, int] = {}
    for shard in recorded(session, submission.id, stage="certification"):
        done[shard.unit] = done.get(shard.unit, 0) + (shard.stop - shard.start)
    return [
        TestSetProgress(
            test_set=ts.name, images_done=done.get(ts.name, 0), images_total=ts.num_images
        )
        for ts in submission.benchmark.test_sets
    ]


def list_own(
    session: Session,
    *,
    user: User,
    state: SubmissionState | None,
    offset: int,
    limit: int,
) -> SubmissionList:
    total, rows = crud.list_for_user(session, user=user, state=state, offset=offset, limit=limit)
    return SubmissionList(
        total=total,
        offset=offset,
        limit=limit,
        items=[public(session, s) for s in rows],
    )


def cancel(session: Session, submission_id: int, *, user: User) -> SubmissionPublic:
    return public(session, crud.cancel(session, submission_id, by=user), events=True)


def rerun(
    session: Session,
    queue: JobQueue,
    submission_id: int,
    *,
    fresh: bool,
    settings: Settings,
) -> SubmissionPublic:
    """Admin re-run: reset to ``submitted`` and queue validation again."""
    submission = crud.rerun(session, submission_id, fresh=fresh, settings=settings)
    _enqueue(session, queue, submission.id)
    return public(session, submission, events=True)


def quota(session: Session, user: User, *, settings: Settings) -> QuotaPublic:
    usage = crud.quota_usage(session, user)
    return QuotaPublic(
        submissions_today=usage.submissions_today,
        submissions_per_day=settings.quota_submissions_per_day,
        unsuccessful_today=usage.unsuccessful_today,
        unsuccessful_per_day=settings.quota_failed_per_day,
        active=usage.active,
        concurrent=settings.quota_concurrent,
    )
