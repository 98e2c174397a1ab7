"""Liveness (the process answers) and readiness (database at the newest migration, queue up)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.deps import QueueDep, SessionDep, SettingsDep
from api.schemas.health import Health, Readiness
from api.services.health import readiness

router = APIRouter(tags=["health"])


@router.get("/health", response_model=Health)
def health() -> Health:
    """The process is up (no dependencies checked)."""
    return Health(status="ok")


@router.get("/ready", response_model=Readiness, responses={503: {"model": Readiness}})
def ready(session: SessionDep, settings: SettingsDep, queue: QueueDep) -> JSONResponse:
    """Database reachable and migrated to head, broker reachable; 503 otherwise."""
    report = readiness(session, queue, settings=settings)
    return JSONResponse(report.model_dump(), status_code=200 if report.status == "ready" else 503)
