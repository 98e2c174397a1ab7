"""Submitting, reading, cancelling and re-running submissions (REST and web share these)."""

from __future__ import annotations

from fastapi import Request
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.queue import JobQueue
from api.schemas.progress import ProgressPublic
from api.schemas.submission import SubmissionList, SubmissionPublic
from api.schemas.user import QuotaPublic
from api.services.intake import build_upload
from api.services.upload_stream import ReceivedUpload, receive_upload
from models.core.errors import IntakeError, ServiceUnavailableError
from models.core.settings import Settings
from models.db.entities import Submission, User
from models.db.states import Reason, SubmissionState
from models.runs import estimates, progress
from models.runs.progress import ProgressReport
from models.submissions import compute_quota, run_seeds, zoo
from models.submissions import intake as intake
from models.submissions import queries as crud
from models.submissions import quotas as quotas
from models.submissions import refusals as upload_refusals
from models.submissions.lifecycle import fail


async def submit(
    request: Request,
    session: Session,
    queue: JobQueue,
    *,
    user: User,
    settings: Settings,
) -> Submission:
    """Check, store and enqueue the upload in ``request``'s body. Returns the new submission, or
    a ``duplicate`` row.

    The quotas are checked before the body is read (and again, authoritatively, in the
    transaction that creates the rows); the weights stream to a staged file. The work is
    estimated from the manifest (``models.runs.estimates``) and checked against the daily compute
    quota. Every IntakeError is counted against the user's refused-upload rate limit
    (``models.submissions.refusals``), checked first. Raises QuotaExceededError (429, also for too
    many refused uploads), IntakeError/PayloadTooLargeError (nothing stored; also for
    an estimate beyond the compute quota), and ServiceUnavailableError when the queue is down
    (the submission is then marked failed, and the error names it).
    """
    await run_in_threadpool(upload_refusals.check, session, user, settings=settings)
    await run_in_threadpool(quotas.check_quotas, session, user, settings=settings)
    await run_in_threadpool(compute_quota.check_room, session, user, settings=settings)
    try:
        received = await receive_upload(request, settings=settings)
        try:
            return await run_in_threadpool(
                _accept, session, queue, received, user=user, settings=settings
            )
        finally:
            received.discard()
    except IntakeError as err:  # refused before anything was stored: counted, then raised
        await run_in_threadpool(upload_refusals.record, session, user, err.code, settings=settings)
        raise


def _accept(
    session: Session,
    queue: JobQueue,
    received: ReceivedUpload,
    *,
    user: User,
    settings: Settings,
) -> Submission:
    if received.manifest is None:
        raise IntakeError(
            "the form part 'manifest' is missing; send the JSON manifest as a part named manifest",
            code="invalid_request",
        )
    if received.weights is None:
        raise IntakeError(
            "the form part 'weights' is missing; send the .safetensors file as a part named "
            "weights",
            code="invalid_request",
        )
    benchmark, upload = build_upload(
        session,
        weights=received.weights,
        manifest_bytes=received.manifest,
        is_private=received.private,
        extra_data=received.extra_data,
        venue=received.venue,
        settings=settings,
        weights_public=received.weights_public,
        weights_license=received.weights_license,
    )
    work = estimates.for_manifest(
        session, benchmark, sigma=upload.sigma, manifest=upload.manifest, settings=settings,
        rates={},
    )  # fmt: skip
    compute_quota.check_size(user, work.forward_passes, settings=settings)
    submission = intake.create_submission(
        session, user=user, benchmark=benchmark, upload=upload, settings=settings,
        forward_passes=work.forward_passes,
    )  # fmt: skip
    if submission.state == SubmissionState.SUBMITTED:
        _enqueue(session, queue, submission.id)
    return submission


def _enqueue(session: Session, queue: JobQueue, submission_id: int) -> None:
    """Queue validation; if the broker is down, mark the submission failed (queue_unavailable,
    which does not count against the submitter's quota) and raise an error naming it."""
    try:
        queue.enqueue_validation(submission_id)
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


def public(
    session: Session,
    submission: Submission,
    *,
    viewer: User | None,
    settings: Settings,
    events: bool = False,
    report: ProgressReport | None = None,
) -> SubmissionPublic:
    """Public shape with the live queue position and progress (``models.runs.progress``), as
    ``viewer`` may see it: ``duplicate_of`` is hidden (null) when the original is another
    user's private or hidden entry, as its message already is."""
    original = (
        session.get(Submission, submission.duplicate_of_id)
        if submission.duplicate_of_id is not None
        else None
    )
    if report is None:
        report = progress.reports(session, [submission], settings=settings)[submission.id]
    return SubmissionPublic.of(
        submission,
        queue_position=crud.queue_position(session, submission),
        with_events=events,
        show_duplicate_of=original is not None and crud.can_see(original, viewer),
        seed=run_seeds.view(session, submission),
        report=report,
    )


def status(
    session: Session, submission_id: int, *, viewer: User, settings: Settings
) -> SubmissionPublic:
    """State, reason, progress, ETA and queue position (owner and admins only)."""
    submission = crud.get_visible(session, submission_id, viewer=viewer, owner_only=True)
    return public(session, submission, viewer=viewer, settings=settings, events=True)


def progress_report(
    session: Session, submission_id: int, *, viewer: User, settings: Settings
) -> ProgressPublic:
    """Progress of every stage and unit, throughput and ETA (owner and admins): the numbers the
    submission's ``progress`` is computed from."""
    submission = crud.get_visible(session, submission_id, viewer=viewer, owner_only=True)
    return ProgressPublic.of(progress.report(session, submission.id, settings=settings))


def status_with_progress(
    session: Session, submission_id: int, *, viewer: User, settings: Settings
) -> tuple[SubmissionPublic, ProgressPublic]:
    """The status and the progress of every stage from one report (the status page shows both,
    so they must agree)."""
    submission = crud.get_visible(session, submission_id, viewer=viewer, owner_only=True)
    report = progress.report(session, submission.id, settings=settings)
    shape = public(session, submission, viewer=viewer, settings=settings, events=True,
                   report=report)  # fmt: skip
    return shape, ProgressPublic.of(report)


def list_own(
    session: Session,
    *,
    user: User,
    state: SubmissionState | None,
    offset: int,
    limit: int,
    settings: Settings,
) -> SubmissionList:
    total, rows = crud.list_for_user(session, user=user, state=state, offset=offset, limit=limit)
    reports = progress.reports(session, rows, settings=settings)
    return SubmissionList(
        total=total,
        offset=offset,
        limit=limit,
        items=[
            public(session, s, viewer=user, settings=settings, report=reports[s.id]) for s in rows
        ],
    )


def cancel(
    session: Session, submission_id: int, *, user: User, settings: Settings
) -> SubmissionPublic:
    cancelled = crud.cancel(session, submission_id, by=user)
    return public(session, cancelled, viewer=user, settings=settings, events=True)


def publish_weights(
    session: Session,
    submission_id: int,
    *,
    user: User,
    publish: bool,
    license: str | None,
    settings: Settings,
) -> SubmissionPublic:
    """Publish or withdraw an entry's weights (``models.submissions.zoo.set_publication``)."""
    submission = zoo.set_publication(
        session, submission_id, by=user, public=publish, license=license
    )
    return public(session, submission, viewer=user, settings=settings)


def rerun(
    session: Session,
    queue: JobQueue,
    submission_id: int,
    *,
    fresh: bool,
    settings: Settings,
    admin: User,
) -> SubmissionPublic:
    """Admin re-run: reset to ``submitted`` and queue validation again."""
    submission = crud.rerun(session, submission_id, fresh=fresh, settings=settings)
    _enqueue(session, queue, submission.id)
    return public(session, submission, viewer=admin, settings=settings, events=True)


def quota(session: Session, user: User, *, settings: Settings) -> QuotaPublic:
    usage = quotas.quota_usage(session, user)
    compute = compute_quota.usage(session, user, settings=settings)
    return QuotaPublic(
        submissions_today=usage.submissions_today,
        submissions_per_day=settings.quota_submissions_per_day,
        unsuccessful_today=usage.unsuccessful_today,
        unsuccessful_per_day=settings.quota_failed_per_day,
        active=usage.active,
        concurrent=settings.quota_concurrent,
        forward_passes_today=compute.used,
        forward_passes_per_day=compute.limit,
    )
