"""``/api/v1/benchmarks`` and ``/api/v1/datasets``: what can be submitted to, and the data."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from api.deps import OptionalUser, SessionDep, SettingsDep
from api.errors import ERROR_RESPONSES
from api.schemas.benchmark import BenchmarkPublic, BenchmarkSummary, DatasetPublic
from api.services import leaderboards as service

router = APIRouter(tags=["benchmarks"], responses=ERROR_RESPONSES)


@router.get(
    "/benchmarks",
    response_model=list[BenchmarkSummary],
    responses={
        200: {
            "headers": {
                "X-Total-Count": {
                    "description": "benchmarks in all pages",
                    "schema": {"type": "integer"},
                }
            }
        }
    },
)
def list_benchmarks(
    session: SessionDep,
    settings: SettingsDep,
    viewer: OptionalUser,
    offset: Annotated[int, Query(ge=0, le=100_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> Response:
    """Benchmarks by name, a page at a time: allowed σ, protocol, entry count and each test
    set's name, config, band and Hub link (``GET /benchmarks/{name}`` has the test sets' full
    details), and whether its data is on this machine (``data_available``; if not, ``data_hint``
    names the fix). ``X-Total-Count`` counts all benchmarks."""
    total, body = service.benchmark_list_json(
        session, viewer=viewer, offset=offset, limit=limit, settings=settings
    )
    return Response(body, media_type="application/json", headers={"X-Total-Count": str(total)})


@router.get("/benchmarks/{name}", response_model=BenchmarkPublic)
def get_benchmark(
    session: SessionDep, settings: SettingsDep, viewer: OptionalUser, name: str
) -> BenchmarkPublic:
    """One benchmark by name, with whether its data is on this machine (``data_available``,
    ``data_hint``) and the estimated work of a submission to it (``estimate``)."""
    return service.benchmark(session, name, viewer=viewer, settings=settings)


@router.get("/datasets", response_model=list[DatasetPublic])
def list_datasets(session: SessionDep) -> list[DatasetPublic]:
    """Published datasets, their Hub links, configs and a ``load_dataset`` one-liner."""
    return service.datasets(session)
