"""``/api/v1/results/{submission_id}``: per-test-set metrics and the per-image records."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import FileResponse

from api.deps import OptionalUser, RowId, SessionDep, SettingsDep
from api.errors import ERROR_RESPONSES
from api.schemas.result import ResultsPublic
from api.services import leaderboards as service

router = APIRouter(prefix="/results", tags=["results"], responses=ERROR_RESPONSES)


@router.get("/{submission_id}", response_model=ResultsPublic)
def get_results(session: SessionDep, viewer: OptionalUser, submission_id: RowId) -> ResultsPublic:
    """Results per test set (ACR, certified accuracy on the radius grid, abstain rate, p_A
    summary, counts, seconds, protocol and evaluator version), the mean summary, and the base
    classifier's robustness (Muthukumar et al. 2025: clean, ℓ∞ and ℓ∞ ∩ PD accuracy at ε = 8/255
    and 16/255; null for a benchmark without that stage)."""
    return service.results(session, submission_id, viewer=viewer)


@router.get(
    "/{submission_id}/records/{test_set}",
    response_class=FileResponse,
    responses={200: {"content": {"application/vnd.apache.parquet": {}}}},
)
def download_records(
    session: SessionDep,
    settings: SettingsDep,
    viewer: OptionalUser,
    submission_id: RowId,
    test_set: str,
) -> FileResponse:
    """The per-image records of one test set (parquet; see certbench.smoothing.records)."""
    path = service.records_file(session, submission_id, test_set, viewer=viewer, settings=settings)
    return FileResponse(
        path,
        media_type="application/vnd.apache.parquet",
        filename=f"submission-{submission_id}-{test_set}.parquet",
    )
