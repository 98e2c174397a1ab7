"""Admin-only routes: users, tokens, moderation, re-run, benchmark loading."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from models.catalog.benchmarks import get_benchmark
from models.core.settings import Settings
from models.db.entities import User
from tests.support.api import Actors, drain_validations
from tests.support.service_factories import finished_submission, tiny_definition

ADMIN_ROUTES = [
    ("post", "/api/v1/admin/users", {"name": "x"}),
    ("get", "/api/v1/admin/users", None),
    ("post", "/api/v1/admin/users/1/tokens", {}),
    ("delete", "/api/v1/admin/tokens/1", None),
    ("patch", "/api/v1/admin/submissions/1", {"hidden": True}),
    ("post", "/api/v1/admin/submissions/1/rerun", {}),
    ("put", "/api/v1/admin/benchmarks", tiny_definition("other")),
]


@pytest.mark.parametrize(("method", "url", "body"), ADMIN_ROUTES)
def test_admin_routes_refuse_others(
    client: TestClient, actors: Actors, method: str, url: str, body: object
):
    kwargs = {"json": body} if body is not None else {}
    anonymous = client.request(method, url, **kwargs)
    assert anonymous.status_code == 401 and anonymous.json()["code"] == "unauthenticated"
    submitter = client.request(method, url, headers=actors.alice, **kwargs)
    assert submitter.status_code == 403 and submitter.json()["code"] == "forbidden"


def test_users_and_tokens(client: TestClient, actors: Actors):
    created = client.post("/api/v1/admin/users", headers=actors.admin, json={"name": "dana"})
    assert created.status_code == 201 and created.json()["role"] == "submitter"
    uid = created.json()["id"]
    clash = client.post("/api/v1/admin/users", headers=actors.admin, json={"name": "dana"})
    assert clash.status_code == 409 and clash.json()["code"] == "conflict"
    invalid = client.post("/api/v1/admin/users", headers=actors.admin, json={"name": "a b"})
    assert invalid.status_code == 422
    token = client.post(
        f"/api/v1/admin/users/{uid}/tokens", headers=actors.admin, json={"label": "ci"}
    )
    assert token.status_code == 201
    secret = token.json()["token"]
    me = client.get("/api/v1/me", headers={"Authorization": f"Bearer {secret}"})
    assert me.status_code == 200 and me.json()["name"] == "dana"
    names = [u["name"] for u in client.get("/api/v1/admin/users", headers=actors.admin).json()]
    assert names == ["alice", "bob", "root", "dana"]
    revoked = client.delete(f"/api/v1/admin/tokens/{token.json()['id']}", headers=actors.admin)
    assert revoked.status_code == 204
    after = client.get("/api/v1/me", headers={"Authorization": f"Bearer {secret}"})
    assert after.status_code == 401 and "revoked" in after.json()["message"]
    assert (
        client.post("/api/v1/admin/users/999/tokens", headers=actors.admin, json={}).status_code
        == 404
    )


def test_moderation_and_rerun(
    client: TestClient, actors: Actors, session: Session, settings: Settings
):
    benchmark = get_benchmark(session, "tiny")
    sid = finished_submission(
        session, user=session.get(User, actors.alice_id), benchmark=benchmark,
        settings=settings, seed=1, name="net",
    )  # fmt: skip
    flagged = client.patch(
        f"/api/v1/admin/submissions/{sid}",
        headers=actors.admin,
        json={"flagged": True, "flag_reason": "uses test data", "is_baseline": True},
    )
    assert flagged.status_code == 200 and flagged.json()["flag_reason"] == "uses test data"
    row = client.get("/api/v1/leaderboards/tiny").json()["rows"][0]
    assert row["flagged"] and row["is_baseline"] and row["flag_reason"] == "uses test data"
    client.patch(f"/api/v1/admin/submissions/{sid}", headers=actors.admin, json={"hidden": True})
    assert client.get("/api/v1/leaderboards/tiny").json()["total"] == 0
    assert client.get("/api/v1/leaderboards/tiny", headers=actors.admin).json()["total"] == 1
    bad = client.patch(
        f"/api/v1/admin/submissions/{sid}", headers=actors.admin, json={"hidden": "maybe"}
    )
    assert bad.status_code == 422
    rerun = client.post(
        f"/api/v1/admin/submissions/{sid}/rerun", headers=actors.admin, json={"fresh": True}
    )
    assert rerun.status_code == 202 and rerun.json()["state"] == "submitted"
    assert rerun.json()["attempt"] == 1 and rerun.json()["shards_done"] == 0
    assert drain_validations(settings) == [sid]
    twice = client.post(f"/api/v1/admin/submissions/{sid}/rerun", headers=actors.admin)
    assert twice.status_code == 409 and twice.json()["code"] == "invalid_transition"
    assert (
        client.post("/api/v1/admin/submissions/424242/rerun", headers=actors.admin).status_code
        == 404
    )


def test_load_benchmark_definition(client: TestClient, actors: Actors):
    loaded = client.put(
        "/api/v1/admin/benchmarks", headers=actors.admin, json=tiny_definition("extra", sets=3)
    )
    assert loaded.status_code == 200 and len(loaded.json()["test_sets"]) == 3
    changed = tiny_definition("extra", sets=1)
    refused = client.put("/api/v1/admin/benchmarks", headers=actors.admin, json=changed)
    assert refused.status_code == 422 and refused.json()["code"] == "bad_benchmark_definition"
    broken = client.put("/api/v1/admin/benchmarks", headers=actors.admin, json={"name": "x"})
    assert broken.status_code == 422 and "format" in broken.json()["message"]


def test_unbounded_definition_numbers_are_422_naming_the_limit(client: TestClient, actors):
    """Issue 27 §4: n ≥ 2³¹ answered 500 and a source_size of 10⁹ was accepted."""
    huge_n = tiny_definition("huge") | {"protocol": {"version": "v", "n": 2**31}}
    sets = [s | {"source_size": 10**9} for s in tiny_definition("huge")["test_sets"]]
    for document in (huge_n, tiny_definition("huge") | {"test_sets": sets}):
        response = client.put("/api/v1/admin/benchmarks", headers=actors.admin, json=document)
        assert response.status_code == 422, response.text
        assert "less than or equal to" in response.json()["message"]
