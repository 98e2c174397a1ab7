"""The ETA counts the queue ahead (issue 34 §1: ``submit --wait`` said 7 min and waited 9 min
40 s behind earlier submissions): a submission's ETA is its own remaining work plus the remaining
work of every active submission made before it, whose shards are queued in front of its own."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from models.core.settings import Settings
from models.db.states import SubmissionState as S
from models.runs import shards
from models.submissions import lifecycle as pipeline
from tests.support.api import Actors
from tests.support.service_factories import manifest, multipart, record_shard, weights_bytes

URL = "/api/v1/submissions"
#: ``tiny``: 2 test sets × 3 images × (n0 4 + n 16) = 120 forward passes; 60 per test set.
TINY_PASSES, SET_PASSES = 120, 60
#: ``record_shard`` records a test set's 60 passes in 0.5 s: 120 samples/s.
RATE = 120.0


def _submit(client: TestClient, headers: dict[str, str], seed: int) -> int:
    response = client.post(URL, headers=headers, **multipart(weights_bytes(seed), manifest()))
    assert response.status_code == 202, response.text
    return response.json()["id"]


def _half_done(session: Session, settings: Settings, sid: int) -> None:
    """Running, its first test set recorded (measured at RATE), the second one left."""
    for source, target in ((S.SUBMITTED, S.VALIDATING), (S.VALIDATING, S.QUEUED),
                           (S.QUEUED, S.RUNNING)):  # fmt: skip
        assert pipeline.transition(
            session, sid, from_states={source}, to_state=target, settings=settings
        )
    first = shards.plan(session, sid, settings=settings)[0]
    assert shards.claim(session, sid, first, worker="w1", settings=settings) is None
    assert record_shard(session, sid, first, settings=settings)
    shards.release_claim(session, sid, first.key, worker="w1")


def test_the_eta_adds_the_remaining_work_of_the_submissions_ahead(
    client: TestClient, actors: Actors, settings: Settings, session: Session
):
    first = _submit(client, actors.alice, seed=0)
    _half_done(session, settings, first)
    second = _submit(client, actors.bob, seed=1)
    third = _submit(client, actors.alice, seed=2)

    running = client.get(f"{URL}/{first}", headers=actors.alice).json()
    assert running["eta_seconds"] == pytest.approx(SET_PASSES / RATE)  # nothing ahead of it
    assert "ahead in the queue" not in running["eta_basis"]

    waiting = client.get(f"{URL}/{second}", headers=actors.bob).json()
    own, ahead = TINY_PASSES / RATE, SET_PASSES / RATE
    assert waiting["eta_seconds"] == pytest.approx(own + ahead)
    assert "1 submission(s) ahead in the queue with 60 forward passes left" in waiting["eta_basis"]

    last = client.get(f"{URL}/{third}", headers=actors.alice).json()
    assert last["eta_seconds"] == pytest.approx(own + ahead + own)
    assert "2 submission(s) ahead" in last["eta_basis"]
    listed = {i["id"]: i for i in client.get(URL, headers=actors.alice).json()["items"]}
    assert listed[third]["eta_seconds"] == pytest.approx(last["eta_seconds"])

    # the first one finished (all its shards recorded, aggregated): no longer ahead of anyone
    record_shard(session, first, shards.plan(session, first, settings=settings)[1],
                 settings=settings)  # fmt: skip
    assert pipeline.transition(session, first, from_states={S.RUNNING}, to_state=S.CANCELLED)
    after = client.get(f"{URL}/{third}", headers=actors.alice).json()
    assert after["eta_seconds"] == pytest.approx(own + own)
    assert "1 submission(s) ahead" in after["eta_basis"]
