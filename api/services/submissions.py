"""Submitting, reading, cancelling and re-running submissions (REST and web share these)."""

from __future__ import annotations

import anyio.to_thread
from fastapi import Request
from sqlalchemy.orm import Session

from api.queue import JobQueue
from api.schemas.progress import ProgressPublic
from api.schemas.submission import SubmissionList, SubmissionPublic
from api.schemas.user import QuotaPublic
from api.services.intake import build_upload
from api.services.upload_stream import receive_upload
from models.core.settings import Settings
from models.db.entities import Submission, User
from models.db.states import SubmissionState
from models.runs import estimates, progress
from models.runs.progress import ProgressReport
from models.submissions import compute_quota, intake, lifecycle, quotas, run_seeds, zoo
from models.submissions import queries as crud

#: Uploads one API process takes in at once; more wait, with their bodies unread. Each holds a
#: worker thread while its body streams (``models.submissions.intake.submit`` runs in one), from
#: this pool and not Starlette's, so slow uploads never starve the other endpoints' threads.
UPLOADS_AT_ONCE = 16
_UPLOADS = anyio.CapacityLimiter(UPLOADS_AT_ONCE)


async def submit(
    request: Request,
    session: Session,
    queue: JobQueue,
    *,
    user: User,
    settings: Settings,
) -> SubmissionPublic:
    """Check, store and enqueue the upload in ``request``'s body; the new submission as ``user``
    sees it, or a ``duplicate`` pointing at an identical earlier one.

    One pass down the layers, in one worker thread: ``models.submissions.intake.submit`` checks
    the refused-uploads limit and refuses a user over quota before the body is read, calls back
    :func:`_prepare` (the weights stream to a staged file, the cheap checks, the estimate), then
    creates the submission (the quota decided in that transaction) and queues it. Raises
    QuotaExceededError (429, also for too many refused uploads), IntakeError/
    PayloadTooLargeError (nothing stored; also for an estimate beyond the compute quota), and
    ServiceUnavailableError when the queue is down (the submission is then marked failed, and
    the error names it).
    """

    def one_pass() -> SubmissionPublic:
        submission = intake.submit(
            session, user, settings=settings, enqueue=queue.enqueue_validation,
            prepare=lambda: _prepare(request, session, settings=settings),
        )  # fmt: skip
        return public(session, submission, viewer=user, settings=settings)

    return await anyio.to_thread.run_sync(one_pass, limiter=_UPLOADS)


def _prepare(request: Request, session: Session, *, settings: Settings) -> intake.Prepared:
    """The API's part of an upload, called back by the intake once the user may upload: read
    the body, run the cheap checks (``api.services.intake``) and estimate the work from the
    manifest (``models.runs.estimates``). Leaves no staged file behind when it raises."""
    received = receive_upload(request, settings=settings)
    try:
        benchmark, upload = build_upload(session, received, settings=settings)
        work = estimates.for_manifest(
            session, benchmark, sigma=upload.sigma, manifest=upload.manifest, settings=settings,
            rates={},
        )  # fmt: skip
    except BaseException:
        received.discard()
        raise
    return intake.Prepared(benchmark, upload, work.forward_passes)


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
    lifecycle.queue_or_fail(session, submission.id, queue.enqueue_validation)
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
        forward_passes_today=compute.forward_passes,
        flops_today=compute.used,
        flops_per_day=compute.limit,
    )
