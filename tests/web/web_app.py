"""The app as uvicorn serves it in the browser tests: ``api.main.create_app`` with the web pages.

``api.main`` mounts the pages itself once its hook is in; until then this adds them, so the tests
always exercise the production app object plus exactly one mount of the web router.
"""

from __future__ import annotations

from fastapi import FastAPI

from api.main import create_app
from api.web import mount_web


def has_web(app: FastAPI) -> bool:
    return any(getattr(route, "name", None) == "web_home" for route in app.routes)


def create() -> FastAPI:
    app = create_app()
    if not has_web(app):
        mount_web(app)
    return app
