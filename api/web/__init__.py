"""The web leaderboard (issue 6): HTML pages and static files served by the same FastAPI app.

``mount_web(app)`` adds the page router and ``/static``; pages read the same service functions as
the REST API (``api.services``), so the two can never disagree.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from api.web import dataset_pages, figure_files, guide, leaderboard_pages, owner_pages
from api.web.analysis import router as analysis_router

STATIC_DIR = Path(__file__).parent / "static"


def mount_web(app: FastAPI) -> None:
    """Include the HTML pages and mount the bundled CSS/JS (no CDN, works offline)."""
    app.include_router(leaderboard_pages.router)
    app.include_router(owner_pages.router)
    app.include_router(dataset_pages.router)
    app.include_router(analysis_router)
    app.include_router(figure_files.router)
    app.include_router(guide.router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
