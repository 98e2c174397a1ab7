"""``/api/v1/entries/{id}``: the model zoo, published weights of leaderboard entries.

Anyone may download the weights of a finished, public, visible entry whose submitter published
them under a licence; owners and admins may download their own in any state. Another user's
private or hidden entry answers 404 like a missing one; a visible entry whose weights are not
published answers 403 (``models.submissions.zoo``).
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import FileResponse, JSONResponse

from api.deps import OptionalUser, RowId, SessionDep, SettingsDep
from api.errors import ERROR_RESPONSES
from api.schemas.zoo import EntryWeightsPublic
from models.submissions import zoo

router = APIRouter(prefix="/entries", tags=["model zoo"], responses=ERROR_RESPONSES)

SHA_HEADER = "X-Weights-SHA256"
LICENSE_HEADER = "X-Weights-License"
_HEADERS_DOC = {
    SHA_HEADER: {
        "description": "SHA-256 (hex) of the weights file; check it after the download",
        "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
    },
    LICENSE_HEADER: {
        "description": "SPDX licence the weights are published under (absent when unpublished)",
        "schema": {"type": "string"},
    },
}


@router.get("/{submission_id}", response_model=EntryWeightsPublic)
def get_entry_weights(
    session: SessionDep, viewer: OptionalUser, submission_id: RowId
) -> EntryWeightsPublic:
    """What to know before downloading an entry's weights: benchmark, licence, SHA-256, size,
    and the manifest that builds the model (``certbench.client.zoo.load_model`` reads this
    first)."""
    return EntryWeightsPublic.of(zoo.downloadable(session, submission_id, viewer=viewer))


@router.get(
    "/{submission_id}/weights",
    response_class=FileResponse,
    responses={
        200: {
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
            "headers": _HEADERS_DOC,
            "description": "the safetensors weights file",
        }
    },
)
def download_weights(
    session: SessionDep, settings: SettingsDep, viewer: OptionalUser, submission_id: RowId
) -> FileResponse:
    """The entry's weights as a safetensors file (streamed). Check ``X-Weights-SHA256``; load
    them with safetensors only (``certbench.nets.loading.load_model``), never with pickle."""
    submission = zoo.downloadable(session, submission_id, viewer=viewer)
    path = zoo.weights_path(submission, settings=settings)
    headers = {SHA_HEADER: submission.artifact.sha256, "X-Content-Type-Options": "nosniff"}
    if submission.weights_license is not None and submission.weights_public:
        headers[LICENSE_HEADER] = submission.weights_license
    if not zoo.publicly_downloadable(submission):
        headers["Cache-Control"] = "private, no-store"  # only its owner and admins may read it
    return FileResponse(
        path,
        media_type="application/octet-stream",
        filename=f"{submission.benchmark.name}-entry-{submission.id}.safetensors",
        headers=headers,
    )


@router.get(
    "/{submission_id}/manifest",
    responses={200: {"content": {"application/json": {"schema": {"type": "object"}}}}},
)
def download_manifest(
    session: SessionDep, viewer: OptionalUser, submission_id: RowId
) -> JSONResponse:
    """The entry's JSON manifest (architecture, classes, normalisation, σ), as uploaded."""
    submission = zoo.downloadable(session, submission_id, viewer=viewer)
    filename = f"{submission.benchmark.name}-entry-{submission.id}.json"
    return JSONResponse(
        dict(submission.artifact.manifest),
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
