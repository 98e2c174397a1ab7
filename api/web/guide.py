"""``/guide``: the documentation site (``uv run mkdocs build`` writes it to ``site/``), served
from disk on every request, so a site built while the service runs is served at once (issue 34
§3: ``/guide`` answered a JSON 404 until ``certbench serve`` was restarted). Until it is built,
``/guide`` is an HTML page of the site saying how to build it (404: there is no guide yet).

The files are Starlette's ``StaticFiles`` answers (its path checks keep a request inside the
folder; ``index.html`` for a folder, the site's own ``404.html`` for a missing page).
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.staticfiles import StaticFiles

from api.deps import SettingsDep
from api.web.rendering import render

router = APIRouter(include_in_schema=False)


def built(site: Path | None) -> bool:
    """Whether ``site`` holds a built guide (its ``index.html``)."""
    return site is not None and (site / "index.html").is_file()


@router.get("/guide", name="web_guide")
@router.get("/guide/{path:path}", name="web_guide_page")
async def guide(request: Request, settings: SettingsDep, path: str = "") -> Response:
    """A page or file of the built guide, or the page saying how to build it."""
    site = settings.guide_dir
    if site is None or not built(site):
        return render(request, "guide_missing.html", {}, status_code=404)
    files = StaticFiles(directory=site, html=True, check_dir=False)
    relative = os.path.normpath(os.path.join(*path.split("/"))) if path.strip("/") else "."
    return await files.get_response(relative, request.scope)
