"""Bad input is a 422 naming the field and the limit, never a 500 (issue 19 §6), on SQLite and
on PostgreSQL (whose JSON and text types refuse NaN, Infinity and NUL that SQLite stores)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.web.auth import COOKIE_NAME
from models.core.settings import Settings
from models.db.entities import Submission
from tests.support.api import Actors, drain_validations
from tests.support.service_factories import manifest, multipart, weights_bytes

URL = "/api/v1/submissions"
NAN, INF = float("nan"), float("inf")


def _with(**changes: object) -> bytes:
    """The factory manifest with nested changes, as JSON with NaN/Infinity literals."""
    doc = manifest()
    for path, value in changes.items():
        section, _, key = path.partition("__")
        if key:
            doc[section] = {**doc[section], key: value}
        else:
            doc[section] = value
    return json.dumps(doc, allow_nan=True).encode()


@pytest.mark.parametrize(
    ("document", "field", "limit"),
    [
        (_with(preprocessing__mean=[0.5, NAN, 0.5]), "preprocessing.mean.1", "finite number"),
        (_with(preprocessing__std=[0.2, INF, 0.2]), "preprocessing.std.1", "finite number"),
        (_with(preprocessing__std=[0.2, -INF, 0.2]), "preprocessing.std.1", "finite number"),
        (_with(smoothing__sigma=INF), "smoothing.sigma", "finite number"),
        (_with(metadata__name="m" * 129), "metadata.name", "at most 128 characters"),
        (_with(metadata__name="a\x00b"), "metadata.name", "control characters"),
        (_with(metadata__licence="MIT\x00"), "metadata.licence", "control characters"),
        (_with(benchmark="ti\x00ny"), "benchmark", "control characters"),
        (_with(input_size=[3, 100000, 100000]), "input_size.1", "less than or equal to 1024"),
        (_with(metadata__name="ResNet\u202e"), "metadata.name", "U+202E (RIGHT-TO-LEFT OVERRIDE)"),
        (_with(metadata__name="Res\u200bNet"), "metadata.name", "U+200B (ZERO WIDTH SPACE)"),
        (_with(metadata__name="ResN\u0435t"), "metadata.name", "mixes CYRILLIC and LATIN"),
    ],
    ids=["nan-mean", "inf-std", "minus-inf-std", "inf-sigma", "long-name", "nul-name",
         "nul-licence", "nul-benchmark", "huge-input", "bidi-name", "zero-width-name",
         "confusable-name"],
)  # fmt: skip
def test_unstorable_manifests_are_422(
    client: TestClient,
    actors: Actors,
    settings: Settings,
    session: Session,
    document: bytes,
    field: str,
    limit: str,
):
    response = client.post(URL, headers=actors.alice, **multipart(weights_bytes(), document))
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "bad_manifest"
    assert field in body["message"] and limit in body["message"]
    assert session.scalar(select(func.count()).select_from(Submission)) == 0
    assert drain_validations(settings) == []


def test_input_size_is_bounded_by_the_benchmark(client: TestClient, actors: Actors):
    document = _with(input_size=[3, 64, 64])
    response = client.post(URL, headers=actors.alice, **multipart(weights_bytes(), document))
    assert response.status_code == 422 and response.json()["code"] == "input_size"
    assert "[3, 32, 32]" in response.json()["message"]


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/api/v1/leaderboards/tiny?search=a%00b", "query.search"),
        ("/api/v1/leaderboards/tiny?architecture=%01", "query.architecture"),
        ("/api/v1/leaderboards/ti%00ny", "path"),
        ("/api/v1/leaderboards/tiny/facets?x%00=1", "query.x\\x00"),
        ("/api/v1/benchmarks/a%00b", "path"),
        ("/api/v1/results/1/records/set%000", "path"),
        ("/leaderboards/a%00b", "path"),
        ("/leaderboards/tiny?search=%00", "query.search"),
        ("/datasets/certbench/ti%00ny", "path"),
    ],
)
def test_control_characters_in_urls_are_422(client: TestClient, actors: Actors, url, field):
    for headers in ({}, actors.alice):
        response = client.get(url, headers=headers)
        assert response.status_code == 422, (url, response.status_code, response.text)
        body = response.json()
        assert body["code"] == "invalid_request" and body["details"][0]["field"] == field
        assert "control character" in body["message"] and "U+00" in body["message"]


@pytest.mark.parametrize(
    "url",
    ["/models/2147483648", "/submissions/2147483648", "/compare?id=1&id=2147483648",
     "/models/0", "/compare?id=1&id=-5"],
)  # fmt: skip
def test_web_ids_out_of_range_are_422_pages(client: TestClient, actors: Actors, url: str):
    token = actors.alice["Authorization"].removeprefix("Bearer ")
    client.cookies.set(COOKIE_NAME, token)
    try:
        response = client.get(url)
    finally:
        client.cookies.clear()
    assert response.status_code == 422, (url, response.status_code)
    assert "text/html" in response.headers["content-type"]
    assert "from 1 to 2147483647" in response.text  # the rule of api.deps.parse_id
