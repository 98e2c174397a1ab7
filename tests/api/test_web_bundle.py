"""The charting script the pages load (``/assets/vega-<version>.js``): built on its first request,
not when an API process starts, and kept in ``<data_dir>/cache/`` so that the deployment's other
and later processes read it instead of building it again (about 1.3 s of CPU each)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from api.web import figure_files
from api.web.figure_files import BUNDLE_URL, bundle_file
from models.core.settings import Settings
from tests.support.service_db import MigratedTemplates, service_settings


@pytest.fixture
def settings(tmp_path: Path, migrated: MigratedTemplates) -> Iterator[Settings]:
    with service_settings("sqlite", tmp_path / "data", template=migrated) as value:
        yield value


@pytest.fixture(autouse=True)
def _fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as a new API process would: nothing held in memory."""
    monkeypatch.setattr(figure_files, "_bundles", {})


def _get_bundle(settings: Settings) -> bytes:
    with TestClient(create_app(settings)) as client:
        response = client.get(BUNDLE_URL)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/javascript")
    assert "immutable" in response.headers["cache-control"]
    return response.content


def test_the_bundle_is_built_on_first_request_and_read_by_the_next_process(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
):
    kept = bundle_file(settings.data_dir)
    with TestClient(create_app(settings)) as client:
        client.get("/health")
        assert not kept.exists()  # starting an API process builds nothing
        body = client.get(BUNDLE_URL).content
    assert b"vegaEmbed" in body and len(body) > 100_000
    assert kept.read_bytes() == body

    def build_again() -> str:
        raise AssertionError("the bundle was built again although the deployment keeps it")

    monkeypatch.setattr(figure_files, "_bundles", {})  # another API process of the deployment
    monkeypatch.setattr(figure_files, "javascript_bundle", build_again)
    assert _get_bundle(settings) == body


def test_a_data_directory_that_cannot_keep_it_still_serves_it_and_says_why(
    settings: Settings, caplog: pytest.LogCaptureFixture
):
    blocker = settings.data_dir / "cache"
    blocker.write_text("a file where the cache folder would go")
    with caplog.at_level(logging.WARNING, logger=figure_files.__name__):
        body = _get_bundle(settings)
    assert b"vegaEmbed" in body
    assert "the Vega bundle is not kept in" in caplog.text
    assert blocker.read_text() == "a file where the cache folder would go"


def test_a_new_vl_convert_release_builds_its_own_file(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
):
    before = bundle_file(settings.data_dir)
    monkeypatch.setattr(figure_files.importlib.metadata, "version", lambda name: "99.0.0")
    after = bundle_file(settings.data_dir)
    assert before != after and after.name.endswith("vl-convert-99.0.0.js")
