"""Every web page against entries seeded the way ``benchmarks/api_load.py`` seeds them (issue 35
§5): finished, ranked entries with every leaderboard figure but no per-test-set results and no
records (as a bulk import or a wiped artifacts folder leaves them). The compare page answered 500
for them (``TypeError: 'numpy.float64' has no len()`` drawing the mean of no curves) while the
REST compare answered 4xx.

The pages are crawled from ``/`` as a visitor and as the seeded admin (every same-site link:
pages, figure downloads, dataset charts), plus the compare pages and their figures, which a
form reaches; no answer may be a 5xx."""

from __future__ import annotations

import importlib.util
import random
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient

import migrations
from api.main import create_app
from models.core.settings import Settings
from models.db.engine import dispose_engines

ROOT = Path(__file__).resolve().parents[2]
ENTRIES = 12
SKIPPED = ("/static", "/guide", "/docs", "/redoc", "/api", "/logout")
LINK = re.compile(r'href="(/[^"#]*)"')


def api_load() -> ModuleType:
    """``benchmarks/api_load.py`` (a script, not a package), for its ``seed``."""
    spec = importlib.util.spec_from_file_location("api_load", ROOT / "benchmarks" / "api_load.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, str]]:
    """The app over a fresh SQLite database holding ``ENTRIES`` entries seeded by api_load;
    yields a client and the seeded admin's token."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("seeded") / "data", environment="test")
    migrations.upgrade(settings)
    token = api_load().seed(settings, ENTRIES, random.Random(0))
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client, token
    dispose_engines()


def crawl(client: TestClient, start: list[str]) -> dict[str, int]:
    """Status of every same-site page reachable from ``start`` (figure downloads as SVG, plus
    the first PNG and PDF, which cost a rendering each)."""
    seen: dict[str, int] = {}
    todo = list(start)
    formats: set[str] = set()
    while todo:
        url = todo.pop(0)
        if url in seen:
            continue
        response = client.get(url)
        seen[url] = response.status_code
        if "html" not in response.headers.get("content-type", ""):
            continue
        for link in LINK.findall(response.text):
            link = link.replace("&amp;", "&")
            suffix = link.split("?")[0].rsplit(".", 1)[-1]
            if link.startswith(SKIPPED) or link in seen:
                continue
            if suffix in ("png", "pdf"):
                if suffix in formats:
                    continue
                formats.add(suffix)
            todo.append(link)
    return seen


CERTIFIED_FIGURE = "/compare/figures/compare-cert-acc.svg?id=1&id=2"


def compare_pages(client: TestClient) -> list[str]:
    """Compare pages of 2, 3 and 4 entries, each figure they list, and the certified-accuracy
    overlay (listed only for entries with results)."""
    pages = [f"/compare?{urlencode([('id', i) for i in ids])}" for ids in ([1, 2], [2, 3, 4],
             [5, 6, 7, 8])]  # fmt: skip
    figures = []
    for page in pages:
        html = client.get(page).text
        figures += [
            link.replace("&amp;", "&")
            for link in LINK.findall(html)
            if link.startswith("/compare/figures/")
        ]
    return [*pages, *figures, CERTIFIED_FIGURE]


def test_every_page_renders_for_entries_without_results(seeded: tuple[TestClient, str]):
    client, token = seeded
    client.cookies.clear()
    visitor = crawl(client, ["/", "/leaderboards/cifar10", *compare_pages(client)])
    signed_in = client.post("/login", data={"token": token}, follow_redirects=False)
    assert signed_in.status_code == 303, signed_in.text
    admin = crawl(client, ["/", "/submissions", "/submissions/1", *compare_pages(client)])
    client.cookies.clear()
    errors = {url: code for url, code in {**visitor, **admin}.items() if code >= 500}
    assert errors == {}
    assert sum(1 for url in visitor if url.startswith("/models/")) >= ENTRIES - 2
    assert visitor["/compare?id=1&id=2"] == 200 and admin["/submissions/1"] == 200
    assert visitor[CERTIFIED_FIGURE] == 404  # no curves: no figure, and a 404 that says so


def test_the_compare_page_says_which_curves_it_lacks(seeded: tuple[TestClient, str]):
    client, _ = seeded
    client.cookies.clear()
    page = client.get("/compare?id=1&id=2")
    assert page.status_code == 200
    assert "none of these entries has per-test-set results" in page.text
    rest = client.get("/api/v1/leaderboards/cifar10/compare", params={"ids": [1, 2]})
    assert 400 <= rest.status_code < 500


def test_a_curve_without_points_is_named_not_a_type_error():
    from certbench.figures import Axis, Curve, line_chart

    axis = Axis("r", 0.0, 1.0)
    with pytest.raises(ValueError, match="curve 'mean': y must be a 1-D sequence"):
        line_chart([Curve("mean", [0.0, 0.5], float("nan"))], title="t", x=axis, y=axis)  # type: ignore[arg-type]
