"""JSON errors with a machine-readable ``code`` and a human ``message``, correct status codes.

Service errors map by class; request validation errors become 422 ``invalid_request`` with the
offending fields; Starlette's own HTTP errors (unknown route, wrong method, unparsable body) keep
their status. A bad input never reaches the generic 500 handler. ``ErrorResponse`` documents the
body in the OpenAPI spec; routers declare it for every error status with ``ERROR_RESPONSES``.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy import exc as db_errors
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from certbench.errors import CertbenchError, ManifestError, ModelLoadError
from models.core.errors import (
    AuthenticationError,
    BenchmarkDefinitionError,
    ConflictError,
    IntakeError,
    InvalidTransitionError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    QuotaExceededError,
    ServiceUnavailableError,
)

log = logging.getLogger(__name__)

#: Most specific class first.
STATUS_BY_ERROR: tuple[tuple[type[Exception], int], ...] = (
    (ServiceUnavailableError, 503),
    (PayloadTooLargeError, 413),
    (IntakeError, 422),
    (AuthenticationError, 401),
    (PermissionDeniedError, 403),
    (NotFoundError, 404),
    (InvalidTransitionError, 409),
    (ConflictError, 409),
    (QuotaExceededError, 429),
    (BenchmarkDefinitionError, 422),
    (ManifestError, 422),
    (ModelLoadError, 422),
)

HTTP_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "quota_exceeded",
    503: "unavailable",
}


class ErrorResponse(BaseModel):
    """Every error: a stable machine-readable code and a message saying what to fix."""

    code: str = Field(examples=["not_safetensors"])
    message: str
    details: list[dict[str, Any]] | None = None


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse} for status in (400, 401, 403, 404, 409, 413, 422, 429, 503)
}


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    """The one error shape every endpoint returns."""
    body: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        body["details"] = details
    return body


def status_for(err: Exception) -> int:
    """HTTP status of a service/core error."""
    for cls, status in STATUS_BY_ERROR:
        if isinstance(err, cls):
            return status
    return 500


#: Seconds a client should wait before retrying after a 503.
RETRY_AFTER_SECONDS = 30


async def _service_error(_request: Request, err: Exception) -> JSONResponse:
    status = status_for(err)
    code = getattr(err, "code", None) or HTTP_CODES.get(status, "error")
    if status == 500:
        log.exception("service error without an HTTP mapping", exc_info=err)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    details = None
    if status == 503:
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
        submission_id = getattr(err, "submission_id", None)
        if submission_id is not None:
            details = [{"submission_id": submission_id}]
    if isinstance(err, QuotaExceededError):
        details = err.details
        if err.retry_after is not None:
            headers = {"Retry-After": str(err.retry_after)}
    return JSONResponse(error_body(code, str(err), details), status_code=status, headers=headers)


#: The database could not be reached or did not answer in time: a connection refused, closed
#: (a restart) or timed out (a partition: ``CERTBENCH_DATABASE_*_TIMEOUT_SECONDS``), a statement
#: cancelled by its time limit, no pooled connection free in time.
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (
    db_errors.OperationalError,
    db_errors.DisconnectionError,
    db_errors.TimeoutError,
)


async def _database_unavailable(_request: Request, err: Exception) -> JSONResponse:
    """503 with Retry-After, not a 500: the request may succeed once the link is back, and the
    pool replaces its dead connections by itself (``pool_pre_ping``)."""
    log.warning("database unavailable: %s", str(err).splitlines()[0] if str(err) else err)
    return JSONResponse(
        error_body("unavailable", "the database is unreachable or did not answer in time; retry"),
        status_code=503,
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


async def _validation_error(_request: Request, err: Exception) -> JSONResponse:
    assert isinstance(err, RequestValidationError)
    details = [
        {"field": ".".join(str(p) for p in item.get("loc", ())), "message": item.get("msg", "")}
        for item in err.errors()
    ]
    summary = "; ".join(f"{d['field']}: {d['message']}" for d in details[:5])
    return JSONResponse(
        error_body("invalid_request", f"invalid request: {summary}", details), status_code=422
    )


async def _http_error(request: Request, err: Exception) -> JSONResponse:
    assert isinstance(err, StarletteHTTPException)
    code = HTTP_CODES.get(err.status_code, "error")
    headers = dict(getattr(err, "headers", None) or {})
    if err.status_code == 405:
        # Mounted apps (static files) see a rewritten scope and name their own methods.
        allowed = allowed_methods(request)
        if allowed or "Allow" not in headers:
            headers["Allow"] = ", ".join(allowed)
    return JSONResponse(
        error_body(code, str(err.detail)),
        status_code=err.status_code,
        headers=headers or None,
    )


#: Methods a route may answer (the order of an ``Allow`` header).
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route answers at this path. Starlette's own ``Allow`` names only the
    first route whose path matches (``GET`` for ``/api/v1/submissions``, forgetting ``POST``)."""
    allowed = []
    for method in METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] == Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return allowed


async def _unexpected(_request: Request, err: Exception) -> JSONResponse:
    log.exception("unhandled error", exc_info=err)
    return JSONResponse(
        error_body("internal_error", "internal server error; the operators have the details"),
        status_code=500,
    )


def install_error_handlers(app: FastAPI) -> None:
    """Register the JSON error handlers on ``app``."""
    app.add_exception_handler(CertbenchError, _service_error)
    for error in DATABASE_UNAVAILABLE:
        app.add_exception_handler(error, _database_unavailable)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
