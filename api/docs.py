"""Interactive API documentation at ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), offline.

FastAPI's own pages load Swagger UI, ReDoc and a favicon from public CDNs, so on a machine
without network access ``/docs`` is a blank page. Here the pages are FastAPI's
(``get_swagger_ui_html``/``get_redoc_html``) but every asset is served by this app from the
bundle the ``fastapi-offline`` package ships (only its static files are used), under
``/static/docs/``. Nothing else is fetched: ReDoc's Google Fonts are off, Swagger UI's
validator badge (which calls validator.swagger.io) is disabled, and both pages carry a
Content-Security-Policy that lets the browser load nothing from another origin. That policy is
what stops the one request no option turns off: ReDoc's side menu always shows Redocly's logo from
cdn.redoc.ly (the image hides itself when it cannot load; the link beside it stays).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_URL = "/docs"
REDOC_URL = "/redoc"
ASSETS_URL = "/static/docs"
#: The files of the bundle the pages use (the test checks they are all present).
ASSETS = ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png")
#: Same origin only. FastAPI's pages start Swagger UI from an inline script, ReDoc injects its
#: styles and runs its search index in a blob: worker, and both draw SVG icons from data: URLs.
DOCS_CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; "
    "worker-src 'self' blob:; frame-ancestors 'self'; base-uri 'self'; form-action 'self'"
)


def assets_dir() -> Path:
    """The folder of the packaged Swagger UI / ReDoc bundle (``fastapi_offline/static``)."""
    return Path(str(files("fastapi_offline") / "static"))


def install_docs(app: FastAPI) -> None:
    """Mount the bundled assets and add ``/docs`` and ``/redoc`` (the app must be created with
    ``docs_url=None, redoc_url=None``). Call before anything is mounted at ``/static``: the
    first mount whose prefix matches a path serves it."""
    app.mount(ASSETS_URL, StaticFiles(directory=assets_dir()), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get(DOCS_URL, include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return _same_origin(
            get_swagger_ui_html(
                openapi_url=f"{root}{openapi_url}",
                title=f"{app.title} API: Swagger UI",
                swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
                swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
                swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
                swagger_ui_parameters={"validatorUrl": None, **(app.swagger_ui_parameters or {})},
            )
        )

    @app.get(REDOC_URL, include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return _same_origin(
            get_redoc_html(
                openapi_url=f"{root}{openapi_url}",
                title=f"{app.title} API: ReDoc",
                redoc_js_url=f"{root}{ASSETS_URL}/redoc.standalone.js",
                redoc_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
                with_google_fonts=False,
            )
        )


def _same_origin(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = DOCS_CSP
    return page
