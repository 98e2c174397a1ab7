"""``/api/v1/leaderboards/{benchmark}``: ranked entries, sortable by any metric, filterable."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from api.deps import OptionalUser, SessionDep
from api.schemas import ERROR_RESPONSES, FacetsPublic, LeaderboardPublic
from api.services import leaderboards as service
from models.leaderboard import SORT_COLUMNS, LeaderboardQuery

router = APIRouter(prefix="/leaderboards", tags=["leaderboards"], responses=ERROR_RESPONSES)

SortKey = Literal[tuple(SORT_COLUMNS)]  # type: ignore[valid-type]


@router.get("/{benchmark}/facets", response_model=FacetsPublic)
def get_facets(session: SessionDep, viewer: OptionalUser, benchmark: str) -> FacetsPublic:
    """Distinct architectures, venues and σ among the visible entries (for filters)."""
    return service.facets(session, benchmark, viewer=viewer)


@router.get("/{benchmark}", response_model=LeaderboardPublic)
def get_leaderboard(
    session: SessionDep,
    viewer: OptionalUser,
    benchmark: str,
    sort: Annotated[
        SortKey,
        Query(
            description=(
                "metric or column to sort by; base_accuracy, linf_acc_8, linf_acc_16, pd_acc_8 "
                "and pd_acc_16 are the base classifier's robustness (seed 004, ε in 1/255), and "
                "entries without it sort last in either order"
            )
        ),
    ] = "macr",
    order: Literal["asc", "desc"] = "desc",
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    sigma: Annotated[float | None, Query(gt=0)] = None,
    architecture: Annotated[str | None, Query(max_length=64)] = None,
    extra_data: bool | None = None,
    venue: Annotated[str | None, Query(max_length=64)] = None,
    search: Annotated[str | None, Query(max_length=100)] = None,
    flagged: bool | None = None,
    baseline: bool | None = None,
    protocol_version: Annotated[str | None, Query(max_length=32)] = None,
) -> LeaderboardPublic:
    """Finished, visible entries ranked by ``sort``; ``rank`` counts within the filtered list.
    Hidden and private entries appear only for their owner and admins. On an OOD benchmark each
    row also carries ``effective_robustness`` on the benchmark aggregate, fitted on read across
    the entries you can see (not a sort key; see ``/api/v1/analysis``)."""
    query = LeaderboardQuery(
        sort=sort,
        order=order,
        offset=offset,
        limit=limit,
        sigma=sigma,
        architecture=architecture,
        extra_data=extra_data,
        venue=venue,
        search=search,
        flagged=flagged,
        baseline=baseline,
        protocol_version=protocol_version,
    )
    page = service.leaderboard(session, benchmark, query, viewer=viewer)
    return service.with_effective_robustness(session, page, viewer=viewer)
