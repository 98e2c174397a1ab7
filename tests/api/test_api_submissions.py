"""POST/GET /api/v1/submissions, cancel: intake checks, storage, queue, dedup, quotas, privacy."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.main import create_app
from models.core.settings import Settings
from models.db.entities import Artifact, Submission
from models.db.states import SubmissionState as S
from models.runs import shards
from models.submissions import lifecycle as pipeline
from tests.support.api import Actors, drain_validations
from tests.support.service_factories import manifest, multipart, record_shard, weights_bytes

URL = "/api/v1/submissions"


def stored_files(settings: Settings) -> list[Path]:
    root = settings.artifacts_dir
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def nothing_stored(session: Session, settings: Settings) -> bool:
    session.expire_all()
    rows = session.scalar(select(func.count()).select_from(Submission))
    artifacts = session.scalar(select(func.count()).select_from(Artifact))
    return rows == 0 and artifacts == 0 and stored_files(settings) == []


def test_submit_queues_validation(
    client: TestClient, actors: Actors, settings: Settings, session: Session
):
    response = client.post(URL, headers=actors.alice, **multipart(weights_bytes(), manifest()))
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["state"] == "submitted" and body["queue_position"] == 1
    assert body["benchmark"] == "tiny" and body["model_name"] == "model"
    assert body["protocol_version"] == "test-v1" and body["sigma"] == 0.25
    assert body["weights_size"] == len(weights_bytes())
    assert drain_validations(settings) == [body["id"]]
    files = stored_files(settings)
    assert len(files) == 1 and files[0].read_bytes() == weights_bytes()
    status = client.get(f"{URL}/{body['id']}", headers=actors.alice).json()
    assert [e["to_state"] for e in status["events"]] == ["submitted"]
    listing = client.get(URL, headers=actors.alice).json()
    assert listing["total"] == 1 and listing["items"][0]["id"] == body["id"]
    assert client.get(URL, headers=actors.bob).json()["total"] == 0


def test_identical_upload_returns_duplicate(client: TestClient, actors: Actors, settings: Settings):
    first = client.post(URL, headers=actors.alice, **multipart(weights_bytes(), manifest()))
    again = client.post(URL, headers=actors.alice, **multipart(weights_bytes(), manifest()))
    assert first.status_code == 202 and again.status_code == 200
    assert again.json()["state"] == "duplicate"
    assert again.json()["duplicate_of"] == first.json()["id"]
    assert again.json()["reason"] == "duplicate"
    assert drain_validations(settings) == [first.json()["id"]]


def _bad_inputs() -> list[tuple[str, object, object, int, str]]:
    real = weights_bytes()
    return [
        ("pickle", pickle.dumps({"w": [1.0, 2.0]}), manifest(), 422, "not_safetensors"),
        ("torch zip", b"PK\x03\x04" + b"\x00" * 64, manifest(), 422, "not_safetensors"),
        ("garbage", b"x" * 200, manifest(), 422, "not_safetensors"),
        ("truncated", real[: len(real) // 2], manifest(), 422, "truncated_weights"),
        ("empty", b"", manifest(), 422, "truncated_weights"),
        ("manifest not json", real, b"{not json", 422, "bad_manifest"),
        ("manifest empty", real, b"", 422, "bad_manifest"),
        ("manifest schema", real, {"benchmark": "tiny"}, 422, "bad_manifest"),
        (
            "unknown arch",
            real,
            manifest() | {"architecture": {"name": "vit_huge", "kwargs": {}}},
            422,
            "unknown_architecture",
        ),
        ("unknown benchmark", real, manifest(benchmark="imagenet"), 422, "benchmark_mismatch"),
        ("class count", real, manifest(classes=100), 422, "benchmark_mismatch"),
        ("sigma", real, manifest(sigma=0.3), 422, "sigma_not_allowed"),
    ]


@pytest.mark.parametrize(
    ("weights", "manifest_doc", "status", "code"),
    [case[1:] for case in _bad_inputs()],
    ids=[case[0] for case in _bad_inputs()],
)
def test_bad_uploads_are_refused_before_storing(
    client: TestClient,
    actors: Actors,
    settings: Settings,
    session: Session,
    weights: bytes,
    manifest_doc: object,
    status: int,
    code: str,
):
    response = client.post(URL, headers=actors.alice, **multipart(weights, manifest_doc))
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code and body["message"]
    assert nothing_stored(session, settings)
    assert drain_validations(settings) == []


def test_oversized_parts_and_bodies(actors: Actors, settings: Settings, session: Session):
    small = settings.model_copy(update={"max_weights_bytes": 4096, "max_manifest_bytes": 256})
    with TestClient(create_app(small), raise_server_exceptions=False) as client:
        response = client.post(URL, headers=actors.alice, **multipart(b"\x00" * 5000, manifest()))
        assert response.status_code == 413 and response.json()["code"] == "too_large"
        response = client.post(URL, headers=actors.alice, **multipart(b"\x00" * 100, b" " * 300))
        assert response.status_code == 413 and "manifest" in response.json()["message"]
        # Far above the per-route body limit: refused by the size middleware.
        response = client.post(
            URL, headers=actors.alice, **multipart(b"\x00" * 200_000, manifest())
        )
        assert response.status_code == 413 and response.json()["code"] == "too_large"
    assert nothing_stored(session, settings)


def test_malformed_requests(client: TestClient, actors: Actors, session: Session, settings):
    only_weights = multipart(weights_bytes(), manifest())
    del only_weights["files"]["manifest"]
    response = client.post(URL, headers=actors.alice, **only_weights)
    assert response.status_code == 422 and response.json()["code"] == "invalid_request"
    assert "manifest" in response.json()["message"]
    response = client.post(URL, headers=actors.alice, json={"weights": "x"})
    assert response.status_code == 422 and response.json()["code"] == "invalid_request"
    response = client.post(
        URL,
        headers=actors.alice | {"Content-Type": "multipart/form-data; boundary=zzz"},
        content=b"--zzz\r\nbroken",
    )
    assert response.status_code in (400, 422) and "code" in response.json()
    assert client.get(f"{URL}/not-a-number", headers=actors.alice).status_code == 422
    assert client.get(f"{URL}/999999", headers=actors.alice).json()["code"] == "not_found"
    assert nothing_stored(session, settings)


def test_authentication(client: TestClient, actors: Actors):
    response = client.post(URL, **multipart(weights_bytes(), manifest()))
    assert response.status_code == 401 and response.json()["code"] == "unauthenticated"
    assert response.headers["www-authenticate"] == "Bearer"
    response = client.get(URL, headers={"Authorization": "Bearer cb_wrong"})
    assert response.status_code == 401 and "invalid API token" in response.json()["message"]
    response = client.get(URL, headers={"Authorization": "Basic abc"})
    assert response.status_code == 401


def test_cancel(client: TestClient, actors: Actors, settings: Settings):
    sid = client.post(URL, headers=actors.alice, **multipart(weights_bytes(), manifest())).json()[
        "id"
    ]
    assert client.post(f"{URL}/{sid}/cancel", headers=actors.bob).status_code == 404
    response = client.post(f"{URL}/{sid}/cancel", headers=actors.alice)
    assert response.status_code == 200
    assert response.json()["state"] == "cancelled" and response.json()["reason"] == (
        "cancelled_by_user"
    )
    again = client.post(f"{URL}/{sid}/cancel", headers=actors.alice)
    assert again.status_code == 409 and again.json()["code"] == "invalid_transition"


def test_quota_returns_429(actors: Actors, settings: Settings):
    tight = settings.model_copy(update={"quota_concurrent": 1})
    with TestClient(create_app(tight), raise_server_exceptions=False) as client:
        first = client.post(URL, headers=actors.alice, **multipart(weights_bytes(0), manifest()))
        assert first.status_code == 202
        second = client.post(URL, headers=actors.alice, **multipart(weights_bytes(1), manifest()))
        assert second.status_code == 429 and second.json()["code"] == "quota_concurrent"
        me = client.get("/api/v1/me", headers=actors.alice).json()
        assert me["quota"]["active"] == 1 and me["quota"]["concurrent"] == 1
        # Another user is not affected.
        other = client.post(URL, headers=actors.bob, **multipart(weights_bytes(1), manifest()))
        assert other.status_code == 202


def test_private_submission_is_owner_only(client: TestClient, actors: Actors):
    response = client.post(
        URL, headers=actors.alice, **multipart(weights_bytes(), manifest(), private=True)
    )
    sid = response.json()["id"]
    assert response.json()["is_private"] is True
    assert client.get(f"{URL}/{sid}", headers=actors.alice).status_code == 200
    assert client.get(f"{URL}/{sid}", headers=actors.admin).status_code == 200
    hidden = client.get(f"{URL}/{sid}", headers=actors.bob)
    assert hidden.status_code == 404 and hidden.json()["code"] == "not_found"
    assert client.get(f"/api/v1/results/{sid}", headers=actors.bob).status_code == 404
    assert client.get(f"/api/v1/results/{sid}").status_code == 404


def test_queue_down_gives_503_and_a_failed_submission(
    actors: Actors, settings: Settings, session: Session
):
    unreachable = settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"})
    with TestClient(create_app(unreachable), raise_server_exceptions=False) as client:
        response = client.post(URL, headers=actors.alice, **multipart(weights_bytes(), manifest()))
        assert response.status_code == 503 and response.json()["code"] == "unavailable"
        ready = client.get("/ready")
        assert ready.status_code == 503 and ready.json()["queue"] != "ok"
    session.expire_all()
    row = session.scalars(select(Submission)).one()
    assert row.state == "failed" and row.reason == "queue_unavailable"


def test_progress_per_test_set(
    client: TestClient, actors: Actors, settings: Settings, session: Session
):

    sid = client.post(URL, headers=actors.alice, **multipart(weights_bytes(), manifest())).json()[
        "id"
    ]
    for source, target in ((S.SUBMITTED, S.VALIDATING), (S.VALIDATING, S.QUEUED),
                           (S.QUEUED, S.RUNNING)):  # fmt: skip
        pipeline.transition(session, sid, from_states={source}, to_state=target, settings=settings)
    plan = shards.plan(session, sid, settings=settings)
    record_shard(session, sid, plan[1], settings=settings)
    progress = client.get(f"{URL}/{sid}/progress", headers=actors.alice).json()
    assert progress["test_sets"] == [
        {"test_set": "set0", "images_done": 0, "images_total": 3},
        {"test_set": "set1", "images_done": 3, "images_total": 3},
    ]
    status = client.get(f"{URL}/{sid}", headers=actors.alice).json()
    assert status["state"] == "running" and status["progress"] == progress["progress"] == 0.5
    assert status["queue_position"] is None
    assert client.get(f"{URL}/{sid}/progress", headers=actors.bob).status_code == 404
