"""Response shapes of the liveness and readiness probes (``/api/v1/health``, ``/api/v1/ready``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ready", "unavailable"]
    database: str
    migrations: str
    queue: str
    embedded_broker: bool
