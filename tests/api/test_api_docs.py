"""``/docs`` (Swagger UI) and ``/redoc`` work offline: every asset comes from this app.

The pages are FastAPI's, pointed at the bundle served under ``/static/docs/`` (``api.docs``);
the browser test (tests/web/test_browser.py) loads them with every other host blocked.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from api.docs import ASSETS, ASSETS_URL, assets_dir
from api.main import create_app
from models.core.settings import Settings

#: Any absolute URL (scheme or protocol-relative) in a page's text.
ABSOLUTE_URL = re.compile(r"(?:https?:)?//[A-Za-z0-9.-]+")
EXPECTED_TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png"}


class _References(HTMLParser):
    """Every URL a page makes the browser fetch: src and href attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("docs"), environment="test")
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_reference_no_external_host(client: TestClient, page: str) -> None:
    response = client.get(page)
    assert response.status_code == 200
    html = response.text
    assert ABSOLUTE_URL.findall(html) == [], "an absolute URL would be fetched from elsewhere"
    parser = _References()
    parser.feed(html)
    assert parser.urls, "the page loads its assets through src/href"
    spec_url = re.search(r"(?:url: |spec-url=)['\"]([^'\"]+)['\"]", html)
    assert spec_url is not None and spec_url.group(1) == "/openapi.json"
    for url in [*parser.urls, spec_url.group(1)]:
        parts = urlsplit(url)
        assert not parts.scheme and not parts.netloc and url.startswith("/"), url
        assert client.get(url).status_code == 200, url
    assert "fonts.googleapis" not in html
    policy = response.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "img-src 'self' data:" in policy
    if page == "/docs":
        assert '"validatorUrl": null' in html  # no call to validator.swagger.io


def test_bundle_is_served_with_its_media_types(client: TestClient) -> None:
    for name in ASSETS:
        assert (assets_dir() / name).is_file(), name
        response = client.get(f"{ASSETS_URL}/{name}")
        assert response.status_code == 200
        assert EXPECTED_TYPES[Path(name).suffix] in response.headers["content-type"]
        assert response.content == (assets_dir() / name).read_bytes()
    # the web pages' own static files are still served next to the bundle
    assert client.get("/static/certbench.css").status_code == 200


def test_docs_pages_stay_out_of_the_openapi_document(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert "/docs" not in paths and "/redoc" not in paths
