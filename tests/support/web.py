"""Helpers of the web tests (their fixtures are in ``tests/web/conftest.py``; the browser, shared
with the guide's layout test, in ``tests/conftest.py``)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.core.settings import Settings
from tests.support import timing
from tests.support.web_seed import Seeded

REPO = Path(__file__).resolve().parents[2]


ARTIFACTS = REPO / "test-artifacts" / "web"


CHROMIUM = Path(os.environ.get("CERTBENCH_CHROMIUM", "/usr/bin/chromium"))


#: Importing the app (torch included) can take a minute on a busy 2-core machine (scaled by the
#: machine's time scale where it is waited for, tests/web/conftest.py).
SERVER_START_SECONDS = 300


#: Playwright's own default deadline (30 s) for each action and navigation of a page.
BROWSER_ACTION_MILLISECONDS = 30_000


CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass(frozen=True)
class Site:
    settings: Settings
    seeded: Seeded
    data_dir: Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scale_waits(context: Any) -> Any:
    """Playwright's default deadline for every action and navigation of ``context`` (a browser
    context or page), stretched by the machine's time scale; returns ``context``."""
    context.set_default_timeout(timing.milliseconds(BROWSER_ACTION_MILLISECONDS))
    return context


def drawn(page: Any) -> None:
    """Wait until vega-embed has drawn every figure of the page (certbench.js marks
    ``<html data-charts>``); fails when a figure could not be drawn."""
    if page.locator("div.vega-chart").count() == 0:
        return
    page.wait_for_function(
        "document.documentElement.dataset.charts", timeout=timing.milliseconds(60_000)
    )
    assert page.evaluate("document.documentElement.dataset.charts") == "drawn"


def screenshot(page: Any, name: str, *, full_page: bool = True) -> Path:
    """Save a screenshot under test-artifacts/web/ for a reviewer to look at."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path
