"""``/api/v1/submissions``: submit a model, follow it, list your own, cancel."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status

from api.deps import CurrentUser, QueueDep, RowId, SessionDep, SettingsDep
from api.errors import ERROR_RESPONSES
from api.openapi import submission_request_body
from api.schemas.progress import ProgressPublic
from api.schemas.submission import SubmissionList, SubmissionPublic
from api.schemas.zoo import WeightsPublication
from api.services import submissions as service
from models.db.states import SubmissionState

router = APIRouter(prefix="/submissions", tags=["submissions"], responses=ERROR_RESPONSES)


@router.post(
    "",
    response_model=SubmissionPublic,
    status_code=status.HTTP_202_ACCEPTED,
    responses={200: {"model": SubmissionPublic, "description": "duplicate of an existing one"}},
    openapi_extra={"requestBody": submission_request_body()},
)
async def create_submission(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    queue: QueueDep,
    user: CurrentUser,
    response: Response,
) -> SubmissionPublic:
    """Upload safetensors weights + a JSON manifest (multipart/form-data). The token and the
    quotas are checked before the body is read; the weights stream to disk. Checked before
    anything is stored; then queued for validation and certification (202). An identical upload
    (same weights, manifest and protocol version) returns a ``duplicate`` submission pointing at
    the original (200). The response's ``estimate`` is the work estimated from the protocol
    (forward passes, and seconds at this fleet's measured throughput, or null). The daily
    compute quota counts that estimate: 422 ``estimate_exceeds_quota`` when it alone exceeds the
    quota, 429 ``quota_compute`` (with ``Retry-After`` and the numbers in ``details``) when it
    does not fit in what is left today. 503 when the task queue is down: the submission is
    recorded as failed (``queue_unavailable``, counted against no quota) and its id is in
    ``details``."""
    submission = await service.submit(request, session, queue, user=user, settings=settings)
    if submission.state == SubmissionState.DUPLICATE:
        response.status_code = status.HTTP_200_OK
    return submission


@router.get("", response_model=SubmissionList)
def list_submissions(
    session: SessionDep,
    settings: SettingsDep,
    user: CurrentUser,
    state: SubmissionState | None = None,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> SubmissionList:
    """Your own submissions, newest first."""
    return service.list_own(
        session, user=user, state=state, offset=offset, limit=limit, settings=settings
    )


@router.get("/{submission_id}", response_model=SubmissionPublic)
def get_submission(
    session: SessionDep, settings: SettingsDep, user: CurrentUser, submission_id: RowId
) -> SubmissionPublic:
    """State, reason, message, progress (fraction of the estimated forward passes, recorded and
    running shards), measured ``throughput``, ``eta_seconds``, the ``estimate``, queue position
    and history (owner and admins)."""
    return service.status(session, submission_id, viewer=user, settings=settings)


@router.get("/{submission_id}/progress", response_model=ProgressPublic)
def get_progress(
    session: SessionDep, settings: SettingsDep, user: CurrentUser, submission_id: RowId
) -> ProgressPublic:
    """Progress of every stage and unit in images and forward passes (recorded shards plus the
    running shards' partial counts), measured throughput and ETA, per stage and overall; its
    ``progress`` is the submission's. Owner and admins.

    Changed: this endpoint returned a bare list of certification test-set rows
    (``test_set``, ``images_done``, ``images_total``); those rows are now ``test_sets``."""
    return service.progress_report(session, submission_id, viewer=user, settings=settings)


@router.post("/{submission_id}/cancel", response_model=SubmissionPublic)
def cancel_submission(
    session: SessionDep, settings: SettingsDep, user: CurrentUser, submission_id: RowId
) -> SubmissionPublic:
    """Cancel a waiting or running submission; a running shard stops within seconds and its
    worker records it as cancelled (409 if it already ended)."""
    return service.cancel(session, submission_id, user=user, settings=settings)


@router.patch("/{submission_id}/weights", response_model=SubmissionPublic)
def publish_weights(
    session: SessionDep,
    settings: SettingsDep,
    user: CurrentUser,
    submission_id: RowId,
    body: WeightsPublication,
) -> SubmissionPublic:
    """Model zoo: publish the weights under an SPDX licence (``public: true``), or withdraw them
    (``public: false``). Only the submitter can publish; an admin can withdraw. Anyone may then
    download them from ``/api/v1/entries/{id}/weights`` once the entry has finished, if the
    entry itself is public and visible."""
    return service.publish_weights(
        session, submission_id, user=user, publish=body.public, license=body.license,
        settings=settings,
    )  # fmt: skip
