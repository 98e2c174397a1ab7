"""The first-run experience: benchmarks whose data is not here are labelled so (REST and web)
and refuse submissions at intake (422 dataset_unavailable); the demo benchmark's reference
entries are submitted once, through the normal intake, whatever the restarts and races."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.commands import prepare_service
from api.main import create_app
from api.queue import JobQueue
from api.services.reference_entries import submit_reference_entries
from models.benchmarks.availability import clear_cache
from models.catalog.benchmarks import packaged_definitions, upsert_benchmark
from models.catalog.reference_entries import REFERENCE_USER, packaged_references
from models.core.settings import Settings
from models.db.entities import Artifact, Submission
from models.db.states import SubmissionState as S
from tests.support.api import Actors, drain_validations
from tests.support.service_factories import manifest, multipart, weights_bytes

URL = "/api/v1/submissions"
FIX = "certbench datasets fetch certbench/tiny"


@pytest.fixture
def checked(settings: Settings) -> Iterator[TestClient]:
    """The app with the local-data check on, as a default deployment runs it."""
    clear_cache()
    on = settings.model_copy(update={"require_local_data": True})
    with TestClient(create_app(on), raise_server_exceptions=False) as value:
        yield value
    clear_cache()


def _count(session: Session, entity: type) -> int:
    session.expire_all()
    return session.scalar(select(func.count()).select_from(entity)) or 0


def test_a_benchmark_without_its_data_refuses_submissions_at_intake(
    checked: TestClient, actors: Actors, settings: Settings, session: Session
):
    refused = checked.post(URL, headers=actors.alice, **multipart(weights_bytes(), manifest()))
    assert refused.status_code == 422, refused.text
    body = refused.json()
    assert body["code"] == "dataset_unavailable"
    assert "data not available here" in body["message"] and FIX in body["message"]
    assert str(settings.data_dir) not in body["message"]
    assert _count(session, Submission) == 0 and _count(session, Artifact) == 0
    assert drain_validations(settings) == []
    quota = checked.get("/api/v1/me", headers=actors.alice).json()["quota"]
    assert quota["unsuccessful_today"] == 0 and quota["submissions_today"] == 0  # costs nothing

    (settings.datasets_dir / "certbench" / "tiny").mkdir(parents=True)  # a local copy arrives
    clear_cache()
    accepted = checked.post(URL, headers=actors.alice, **multipart(weights_bytes(), manifest()))
    assert accepted.status_code == 202, accepted.text
    assert drain_validations(settings) == [accepted.json()["id"]]


def test_the_benchmark_json_and_pages_say_data_not_available_here(
    checked: TestClient, client: TestClient, actors: Actors, settings: Settings
):
    detail = checked.get("/api/v1/benchmarks/tiny").json()
    assert detail["data_available"] is False and detail["data_command"] == FIX
    assert FIX in detail["data_hint"] and str(settings.data_dir) not in detail["data_hint"]
    (summary,) = checked.get("/api/v1/benchmarks").json()
    assert summary["data_available"] is False and summary["data_command"] == FIX
    home = checked.get("/").text
    assert "Data not available here" in home and f"<code>uv run {FIX}</code>" in home
    board = checked.get("/leaderboards/tiny").text
    assert 'id="data-missing"' in board and f"uv run {FIX}" in board
    # A deployment that does not check (workers elsewhere hold the data) says nothing.
    unchecked = client.get("/api/v1/benchmarks/tiny").json()
    assert unchecked["data_available"] is None and unchecked["data_hint"] is None
    assert "Data not available here" not in client.get("/").text


def _load_demo(session: Session) -> None:
    upsert_benchmark(session, {d.name: d for d in packaged_definitions()}["demo-digits"])


def _references(session: Session) -> list[Submission]:
    session.expire_all()
    return list(session.scalars(select(Submission).order_by(Submission.id)))


def test_reference_entries_are_submitted_once_as_public_baselines(
    settings: Settings, session: Session, checked: TestClient
):
    _load_demo(session)
    queue = JobQueue(settings)
    try:
        first = submit_reference_entries(settings, queue)
        again = submit_reference_entries(settings, queue)
    finally:
        queue.close()
    assert sorted(o.status for o in first) == ["submitted", "submitted"]
    assert [o.status for o in again] == ["present", "present"]
    rows = _references(session)
    assert [r.id for r in rows] == sorted(o.submission_id for o in first)
    assert drain_validations(settings) == [r.id for r in rows]
    for row in rows:
        assert row.user.name == REFERENCE_USER and row.is_baseline and not row.is_private
        assert row.state == S.SUBMITTED and row.benchmark.name == "demo-digits"
    names = {r.model_name for r in rows}
    assert names == {
        "LeNet-5, Gaussian noise augmentation σ = 1 (reference)",
        "LeNet-5, trained without noise (reference)",
    }
    # The demo's data is generated where it is missing, so it is "here" and takes submissions.
    demo = checked.get("/api/v1/benchmarks/demo-digits").json()
    assert demo["data_available"] is True and "not comparable with papers" in demo["title"]


def test_concurrent_starts_submit_each_reference_once(settings: Settings, session: Session):
    _load_demo(session)
    queues = [JobQueue(settings) for _ in range(3)]
    try:
        with ThreadPoolExecutor(len(queues)) as pool:
            outcomes = list(pool.map(lambda q: submit_reference_entries(settings, q), queues))
    finally:
        for queue in queues:
            queue.close()
    statuses = sorted(o.status for run in outcomes for o in run)
    assert statuses == ["present"] * 4 + ["submitted"] * 2
    rows = _references(session)
    assert len(rows) == 2 and {r.state for r in rows} == {S.SUBMITTED}
    assert sorted(drain_validations(settings)) == [r.id for r in rows]


def test_serve_preparation_submits_references_unless_turned_off(
    settings: Settings, session: Session
):
    off = settings.model_copy(update={"demo_references": False})
    prepare_service(off, load_benchmarks=True)
    assert _references(session) == []
    assert (settings.datasets_dir / "demo-digits" / "README.md").is_file()  # data written
    prepare_service(settings, load_benchmarks=True, demo_references=False)
    assert _references(session) == []
    prepare_service(settings, load_benchmarks=True)
    prepare_service(settings, load_benchmarks=True)  # a restart
    rows = _references(session)
    assert len(rows) == len([r for r in packaged_references() if r.benchmark == "demo-digits"])
    assert len(drain_validations(settings)) == len(rows)
