"""Health, readiness, OpenAPI docs and the JSON shape of routing errors."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from api.main import create_app
from models.core.settings import Settings
from tests.support.api import Actors


def test_health_and_ready(client: TestClient):
    assert client.get("/health").json() == {"status": "ok"}
    ready = client.get("/api/v1/ready")
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready" and ready.json()["migrations"] == "ok"


def test_ready_reports_an_unmigrated_database(tmp_path: Path):
    settings = Settings(data_dir=tmp_path, environment="test")
    with TestClient(create_app(settings)) as client:
        ready = client.get("/ready")
    assert ready.status_code == 503
    assert "run migrations" in ready.json()["migrations"]


def test_openapi_and_docs(client: TestClient):
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    for path in (
        "/api/v1/submissions",
        "/api/v1/submissions/{submission_id}",
        "/api/v1/submissions/{submission_id}/cancel",
        "/api/v1/benchmarks",
        "/api/v1/leaderboards/{benchmark}",
        "/api/v1/results/{submission_id}",
        "/api/v1/results/{submission_id}/records/{test_set}",
        "/api/v1/datasets",
        "/api/v1/admin/users",
        "/health",
        "/ready",
    ):
        assert path in paths, path
    assert "multipart/form-data" in paths["/api/v1/submissions"]["post"]["requestBody"]["content"]
    assert "ErrorResponse" in spec["components"]["schemas"]
    docs = client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


def test_routing_errors_are_json(client: TestClient):
    missing = client.get("/api/v1/nothing-here")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    wrong = client.delete("/api/v1/benchmarks")
    assert wrong.status_code == 405 and wrong.json()["code"] == "method_not_allowed"


def test_out_of_range_ids_are_422_not_500(client: TestClient, actors: Actors):
    huge = 10**20
    for url in (
        f"/api/v1/results/{huge}",
        f"/api/v1/results/{huge}/records/set0",
        f"/api/v1/submissions/{huge}",
        "/api/v1/results/0",
        "/api/v1/submissions?offset=100000000000000000000",
    ):
        response = client.get(url, headers=actors.alice)
        assert response.status_code == 422, (url, response.status_code)
        assert response.json()["code"] == "invalid_request"
    response = client.post(f"/api/v1/submissions/{huge}/cancel", headers=actors.alice)
    assert response.status_code == 422
    response = client.patch(
        f"/api/v1/admin/submissions/{huge}", headers=actors.admin, json={"hidden": True}
    )
    assert response.status_code == 422
