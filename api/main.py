"""Build the FastAPI app: settings, queue client, error handlers, size limits, routers.

Run it with ``certbench serve`` (migrations first, then uvicorn with ``--factory``) or
``uvicorn api.main:create_app --factory``. No work happens at import time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cache

from fastapi import APIRouter, FastAPI

from api.docs import install_docs
from api.errors import install_error_handlers
from api.limits import BodySizeLimit
from api.openapi import install_openapi
from api.queue import JobQueue
from api.routes import (
    admin,
    analysis,
    benchmarks,
    exports,
    health,
    leaderboards,
    results,
    submissions,
    users,
    zoo,
)
from api.url_guard import ControlCharacterGuard
from api.web import mount_web
from models.core.settings import Settings, get_settings

API_PREFIX = "/api/v1"
#: Multipart framing on top of the two parts' own caps.
MULTIPART_OVERHEAD = 64 * 1024


@cache
def api_router() -> APIRouter:
    """Every REST v1 router, assembled once per process and included by every app, as the
    routers of its modules are: FastAPI keeps what it derives from a router's routes (their
    dependants and fields) with the router, so an app that includes a new assembly derives them
    all again (80 ms of CPU per ``create_app``, measured; the test suite creates hundreds)."""
    router = APIRouter(prefix=API_PREFIX)
    modules = (submissions, benchmarks, leaderboards, exports, results, zoo, analysis, users, admin)
    for module in modules:
        router.include_router(module.router)
    return router


def create_app(settings: Settings | None = None) -> FastAPI:
    """The certbench service app for ``settings`` (default: from the environment)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        app.state.queue.close()

    app = FastAPI(
        title="certbench",
        summary="Certified-robustness leaderboard: submit models, read ranked results.",
        version="1",
        lifespan=lifespan,
        docs_url=None,  # /docs and /redoc come from api.docs, with no CDN
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.settings = settings
    app.state.queue = JobQueue(settings)
    install_error_handlers(app)
    install_openapi(app)
    app.add_middleware(
        BodySizeLimit,
        limits={
            f"{API_PREFIX}/submissions": settings.max_weights_bytes
            + settings.max_manifest_bytes
            + MULTIPART_OVERHEAD
        },
        default_limit=1024 * 1024,
    )
    app.add_middleware(ControlCharacterGuard)  # outermost: runs before anything else
    app.include_router(health.router)
    app.include_router(health.router, prefix=API_PREFIX)
    app.include_router(api_router())
    install_docs(app)  # mounts /static/docs, so before mount_web's /static
    mount_web(app)  # /guide among the pages (api.web.guide: the built site, read per request)
    return app
