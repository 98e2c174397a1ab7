"""The packaged reference entries are in the model zoo: their weights ship in the repository
under the project's licence (Apache-2.0), so ``certbench download <reference id>`` works for
anyone once they have finished (issue 25 §3: it answered 403 weights_not_public), and an
installation that submitted them before they were published publishes them on its next start.
"""

from __future__ import annotations

import hashlib

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.queue import JobQueue
from api.services.reference_entries import submit_reference_entries
from models.catalog.benchmarks import packaged_definitions, upsert_benchmark
from models.catalog.reference_entries import REFERENCE_LICENSE, packaged_references
from models.core.settings import Settings
from models.db.entities import Submission
from models.db.states import SubmissionState

ENTRIES = "/api/v1/entries"


def _submit(settings: Settings) -> list:
    queue = JobQueue(settings)
    try:
        return submit_reference_entries(settings, queue)
    finally:
        queue.close()


def _finish(session: Session, row: Submission) -> None:
    """The entry as the workers leave it (the zoo serves finished entries only); the pipeline
    itself is tested elsewhere, the demo's stages are not simulated here."""
    row.state = SubmissionState.FINISHED
    session.commit()


def _references(session: Session) -> list[Submission]:
    session.expire_all()
    return list(session.scalars(select(Submission).order_by(Submission.id)))


def test_finished_references_are_downloadable_by_anyone_under_apache_2(
    client: TestClient, settings: Settings, session: Session
):
    upsert_benchmark(session, {d.name: d for d in packaged_definitions()}["demo-digits"])
    outcomes = _submit(settings)
    assert sorted(o.status for o in outcomes) == ["submitted", "submitted"]
    packaged = {
        hashlib.sha256(r.weights).hexdigest(): r
        for r in packaged_references()
        if r.benchmark == "demo-digits"
    }
    for row in _references(session):
        assert row.weights_public and row.weights_license == REFERENCE_LICENSE == "Apache-2.0"
        _finish(session, row)
        info = client.get(f"{ENTRIES}/{row.id}")  # no token: anyone
        assert info.status_code == 200, info.text
        entry = info.json()
        assert entry["license"] == "Apache-2.0" and entry["benchmark"] == "demo-digits"
        weights = client.get(entry["weights_url"])
        assert weights.status_code == 200
        assert weights.headers["x-weights-license"] == "Apache-2.0"
        reference = packaged[hashlib.sha256(weights.content).hexdigest()]
        assert weights.content == reference.weights
        assert client.get(entry["manifest_url"]).status_code == 200


def test_an_older_installation_publishes_its_references_but_keeps_a_takedown(
    client: TestClient, settings: Settings, session: Session
):
    upsert_benchmark(session, {d.name: d for d in packaged_definitions()}["demo-digits"])
    _submit(settings)
    older, withdrawn = _references(session)
    older.weights_public, older.weights_license = False, None  # submitted before the zoo had them
    withdrawn.weights_public = False  # an admin's takedown keeps the licence
    session.commit()
    _finish(session, older)
    _finish(session, withdrawn)
    assert client.get(f"{ENTRIES}/{older.id}").status_code == 403
    again = _submit(settings)
    assert [o.status for o in again] == ["present", "present"]
    assert sorted(o.message for o in again) == ["", "weights published under Apache-2.0"]
    older, withdrawn = _references(session)
    assert older.weights_public and older.weights_license == "Apache-2.0"
    assert not withdrawn.weights_public
    assert client.get(f"{ENTRIES}/{older.id}").json()["license"] == "Apache-2.0"
    assert client.get(f"{ENTRIES}/{withdrawn.id}").status_code == 403
