"""``/api/v1/leaderboards/{benchmark}``: ranked entries, sortable by any metric, filterable."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response
from pydantic import Field

from api.deps import OptionalUser, SessionDep, SettingsDep, parse_id
from api.errors import ERROR_RESPONSES
from api.schemas.comparison import ComparisonPublic
from api.schemas.leaderboard import FacetsPublic, LeaderboardPublic
from api.services import leaderboard_page as page_service
from api.services import leaderboards as service
from certbench.smoothing import RADII
from models.boards.leaderboard import SORT_COLUMNS, LeaderboardQuery
from models.core.errors import IntakeError

router = APIRouter(prefix="/leaderboards", tags=["leaderboards"], responses=ERROR_RESPONSES)

MAX_COMPARED = 10
SORT_HELP = (
    "the figure to rank by: a field of the rows' `metrics` (its key as written there, e.g. "
    "`macr`, `cert_acc_050`, `band_low`, `pd_acc_8`) or `sigma`, `submitted`, `finished`, "
    "`model_name`. The keys a benchmark has are listed as `sort_keys` by "
    "`GET /api/v1/benchmarks/{name}` (the enum here is every key of any benchmark); a key the "
    "benchmark lacks is a 422 `invalid_sort` naming its keys. Entries without the figure (e.g. "
    "the base classifier's robustness before that stage ran) sort last in either order"
)


@router.get("/{benchmark}/facets", response_model=FacetsPublic)
def get_facets(session: SessionDep, viewer: OptionalUser, benchmark: str) -> FacetsPublic:
    """Distinct architectures, venues and σ among the visible entries (for filters)."""
    return service.facets(session, benchmark, viewer=viewer)


@router.get("/{benchmark}/compare", response_model=ComparisonPublic)
def compare_entries(
    session: SessionDep,
    settings: SettingsDep,
    viewer: OptionalUser,
    benchmark: str,
    ids: Annotated[
        list[str],
        Query(
            description="submission ids of 2 to 10 finished entries: repeat (ids=3&ids=7) or "
            "comma-separate (ids=3,7)"
        ),
    ],
    radius: Annotated[
        list[Annotated[float, Field(ge=0, le=10)]] | None,
        Query(description="radii for certified accuracy; default 0, 0.25, 0.5, 0.75, 1"),
    ] = None,
) -> ComparisonPublic:
    """Paired tests between every pair of the entries (same images): mACR (ACR for one test
    set) and band means by paired bootstrap over the shared source images, certified accuracy at
    each radius by exact McNemar (one test set) or paired bootstrap; differences with 95 %
    intervals, p-values, and ``tied`` where a difference is not significant at 5 %."""
    parsed = _ids(ids)
    return service.compare(
        session, benchmark, parsed, radii=radius or list(RADII), viewer=viewer, settings=settings
    )


def _ids(values: list[str]) -> list[int]:
    out = []
    for value in (part.strip() for v in values for part in v.split(",")):
        try:
            out.append(parse_id(value, name="ids"))
        except ValueError as err:
            raise IntakeError(
                f"{err}; pass ids=3&ids=7 or ids=3,7", code="invalid_request"
            ) from err
    if not 2 <= len(out) <= MAX_COMPARED:
        raise IntakeError(
            f"ids: compare 2 to {MAX_COMPARED} entries, got {len(out)}", code="invalid_request"
        )
    return out


@router.get("/{benchmark}", response_model=LeaderboardPublic)
def get_leaderboard(
    session: SessionDep,
    settings: SettingsDep,
    viewer: OptionalUser,
    benchmark: str,
    sort: Annotated[
        str,
        Query(
            max_length=64,
            description=SORT_HELP,
            json_schema_extra={"enum": sorted(SORT_COLUMNS)},
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
    denoiser: Annotated[
        Literal["none", "any", "diffusion", "dncnn"] | None,
        Query(
            description="denoised smoothing entries: none (plain classifiers), any, or one "
            "denoiser kind; their architecture reads `<denoiser> · <classifier>`"
        ),
    ] = None,
) -> Response:
    """Finished, visible entries ranked by ``sort``; ``rank`` counts within the filtered list.
    Hidden and private entries appear only for their owner and admins. Every certification
    figure carries its 95 % interval (``metrics.intervals``, ``<key>_ci_low``/``_ci_high``);
    sorted by mACR, certified accuracy or a band, ``tied_with`` marks an entry that does not
    differ significantly from the one above (paired test on the same images).
    On an OOD benchmark each row also carries ``effective_robustness`` on the benchmark
    aggregate, fitted on read across the entries you can see (not a sort key; see
    ``/api/v1/analysis``)."""
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
        denoiser=denoiser,
    )
    # Bytes spliced from rows serialised once per board snapshot (``leaderboard_page``):
    # returning the model would have FastAPI dump it, validate the dump and serialise it again;
    # ``response_model`` still documents the shape.
    body = page_service.leaderboard_json(
        session, benchmark, query, viewer=viewer, settings=settings
    )
    return Response(body, media_type="application/json")
