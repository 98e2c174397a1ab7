"""``GET /api/v1/benchmarks`` is slim and paged (issue 19 §9): brief test sets, a total count, and
shapes cached per process yet current after a definition changes."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from models.catalog.benchmarks import packaged_definitions, parse_definition, upsert_benchmark
from tests.support.api import Actors
from tests.support.service_factories import tiny_definition


def test_the_list_is_slim_and_paged(client: TestClient, actors: Actors, session: Session):
    for definition in packaged_definitions():
        upsert_benchmark(session, definition)
    listing = client.get("/api/v1/benchmarks")
    assert listing.status_code == 200
    names = [b["name"] for b in listing.json()]
    assert names == sorted(names) and int(listing.headers["x-total-count"]) == len(names)
    by_name = {b["name"]: b for b in listing.json()}
    fourier = by_name["cifar10-f"]
    assert fourier["test_set_count"] == len(fourier["test_sets"]) == 192
    assert set(fourier["test_sets"][0]) == {"name", "config", "band", "hub_url", "source"}
    detail = client.get("/api/v1/benchmarks/cifar10-f").json()
    assert [t["name"] for t in detail["test_sets"]] == [t["name"] for t in fourier["test_sets"]]
    assert detail["test_sets"][0]["num_images"] == 500
    # Less than half the bytes of the full shapes it replaces.
    assert len(listing.content) * 2 < sum(
        len(client.get(f"/api/v1/benchmarks/{name}").content) for name in names
    )
    page = client.get("/api/v1/benchmarks", params={"offset": 2, "limit": 3})
    assert [b["name"] for b in page.json()] == names[2:5]
    assert page.headers["x-total-count"] == listing.headers["x-total-count"]
    assert client.get("/api/v1/benchmarks", params={"limit": 0}).status_code == 422


def test_a_changed_definition_shows_at_once(client: TestClient, actors: Actors, session: Session):
    before = {b["name"]: b for b in client.get("/api/v1/benchmarks").json()}["tiny"]
    assert before["test_set_count"] == 2
    bigger = tiny_definition(version=2, sets=3)
    upsert_benchmark(session, parse_definition(json.dumps(bigger)))
    after = {b["name"]: b for b in client.get("/api/v1/benchmarks").json()}["tiny"]
    assert after["test_set_count"] == 3 and after["definition_version"] == 2
    assert [t["name"] for t in after["test_sets"]] == ["set0", "set1", "set2"]
