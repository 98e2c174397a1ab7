"""``/api/v1/benchmarks`` and ``/api/v1/datasets``: what can be submitted to, and the data."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import OptionalUser, SessionDep
from api.schemas import ERROR_RESPONSES, BenchmarkPublic, DatasetPublic
from api.services import leaderboards as service

router = APIRouter(tags=["benchmarks"], responses=ERROR_RESPONSES)


@router.get("/benchmarks", response_model=list[BenchmarkPublic])
def list_benchmarks(session: SessionDep, viewer: OptionalUser) -> list[BenchmarkPublic]:
    """Every benchmark: test sets (with Hub links), allowed σ, protocol, entry count."""
    return service.benchmarks(session, viewer=viewer)


@router.get("/benchmarks/{name}", response_model=BenchmarkPublic)
def get_benchmark(session: SessionDep, viewer: OptionalUser, name: str) -> BenchmarkPublic:
    """One benchmark by name."""
    return service.benchmark(session, name, viewer=viewer)


@router.get("/datasets", response_model=list[DatasetPublic])
def list_datasets(session: SessionDep) -> list[DatasetPublic]:
    """Published datasets, their Hub links, configs and a ``load_dataset`` one-liner."""
    return service.datasets(session)
