"""Every id a route takes is read by one function (``api.deps.parse_id``): ASCII digits within
the Integer columns' range, 422 otherwise, on SQLite and PostgreSQL (issue 27 §4). Before, the
compare endpoint answered 500 for ``²``, ``①``, ids ≥ 2³¹ (PostgreSQL) or ≥ 2⁶³ (SQLite), and the
path ids took ``+5``, `` 5``, ``5.0`` and ``1_0`` as other ids."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from api.deps import MAX_ID, parse_id
from tests.support.api import Actors

BAD_IDS = ["²", "①", "٣", "１２", "+5", " 5", "5.0", "1_0", "0", "-1", str(MAX_ID + 1), str(2**63)]


@pytest.mark.parametrize("value", ["1", "42", str(MAX_ID)])
def test_parse_id_takes_ascii_digits_in_range(value: str):
    assert parse_id(value) == int(value)


@pytest.mark.parametrize("value", BAD_IDS)
def test_parse_id_refuses_everything_else_naming_the_rule(value: str):
    with pytest.raises(ValueError, match=f"ids run from 1 to {MAX_ID}|ASCII digits from 1"):
        parse_id(value)


@pytest.mark.parametrize("bad", [b for b in BAD_IDS if b == b.strip()])  # "3, 7" is fine
def test_compare_ids_are_422_never_500(client: TestClient, actors: Actors, bad: str):
    for url in ("/api/v1/leaderboards/tiny/compare", "/api/v1/leaderboards/tiny/compare/export"):
        response = client.get(url, params={"ids": f"1,{bad}"})
        assert response.status_code == 422, (url, bad, response.text)
        assert "ids" in response.json()["message"]


def _id_routes(client: TestClient) -> list[tuple[str, str]]:
    """(method, path template) of every route whose path holds an id (routers included with a
    prefix are walked through their effective routes)."""
    routes = []
    for route in client.app.routes:
        effective = getattr(route, "effective_route_contexts", None)
        routes.extend(effective() if effective is not None else [route])
    out = []
    for route in routes:
        path, methods = getattr(route, "path", ""), getattr(route, "methods", None) or set()
        if re.search(r"\{\w*id\}", path):
            out.extend((method, path) for method in sorted(methods - {"HEAD"}))
    return out


def test_every_path_id_is_read_by_parse_id(client: TestClient, actors: Actors):
    routes = _id_routes(client)
    assert len(routes) >= 15, routes  # submissions, results, entries, admin, web pages
    for method, template in routes:
        for bad in ("+5", "5.0", "²", str(2**63)):
            url = re.sub(r"\{\w*id\}", bad, template)
            url = re.sub(r"\{(\w+)\}", "x", url)  # other path parts (stage, name, fmt)
            response = client.request(method, url, headers=actors.admin)
            assert response.status_code == 422, (method, template, bad, response.text[:200])


def test_web_compare_ids_are_read_by_parse_id(client: TestClient, actors: Actors):
    response = client.get("/compare?id=1&id=%2B5")
    assert response.status_code == 422 and "is not an id" in response.text
