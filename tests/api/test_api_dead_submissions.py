"""Failed, rejected and cancelled submissions are their owner's business (issue 12 §4).

Public pages and public REST (leaderboard, facets, entry counts, results, records, compare,
model pages, home, datasets) never show them, not even when public; their owner (and admins)
see them with the reason on the status page and in their own list.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import unescape

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from api.web.auth import COOKIE_NAME
from models.catalog.benchmarks import get_benchmark
from models.core.settings import Settings
from models.db.entities import User
from models.db.states import Reason, SubmissionState
from models.submissions import lifecycle as pipeline
from models.submissions.intake import create_submission
from tests.support.api import Actors
from tests.support.service_factories import finished_submission, upload

S = SubmissionState
FAILED_MESSAGE = "the test set's data is not available on this server: run the fetch command"


@dataclass(frozen=True)
class Board:
    good: int
    dead: dict[str, int]  # state → submission id


def _ended(session: Session, settings: Settings, user: User, seed: int, state: S) -> int:
    """A public submission of ``user`` that ended in ``state`` (the way the pipeline ends it)."""
    benchmark = get_benchmark(session, "tiny")
    sid = create_submission(
        session, user=user, benchmark=benchmark, upload=upload(seed=seed, name=f"dead-{state}"),
        settings=settings,
    ).id  # fmt: skip
    reason, message = {
        S.REJECTED: (Reason.STATE_DICT_MISMATCH, "weights do not fit cifar_resnet20"),
        S.FAILED: (Reason.DATASET_UNAVAILABLE, FAILED_MESSAGE),
        S.CANCELLED: (Reason.CANCELLED_BY_USER, "cancelled by its owner"),
    }[state]
    if state == S.FAILED:
        pipeline.transition(
            session, sid, from_states={S.SUBMITTED}, to_state=S.VALIDATING, settings=settings
        )
        pipeline.transition(session, sid, from_states={S.VALIDATING}, to_state=S.QUEUED)
        source = S.QUEUED
    else:
        source = S.SUBMITTED
    assert pipeline.transition(
        session, sid, from_states={source}, to_state=state, reason=reason, message=message
    )
    session.commit()
    return sid


@pytest.fixture
def board(session: Session, settings: Settings, actors: Actors) -> Board:
    alice = session.get(User, actors.alice_id)
    good = finished_submission(
        session, user=alice, benchmark=get_benchmark(session, "tiny"), settings=settings, seed=1,
        name="good-net",
    )  # fmt: skip
    dead = {
        str(state): _ended(session, settings, alice, seed, state)
        for seed, state in ((2, S.FAILED), (3, S.REJECTED), (4, S.CANCELLED))
    }
    return Board(good, dead)


def test_public_rest_never_shows_them(client: TestClient, actors: Actors, board: Board) -> None:
    for headers in ({}, actors.bob):
        rows = client.get("/api/v1/leaderboards/tiny", headers=headers).json()
        assert [r["submission_id"] for r in rows["rows"]] == [board.good]
        assert rows["total"] == 1
        assert client.get("/api/v1/benchmarks/tiny", headers=headers).json()["entries"] == 1
        assert client.get("/api/v1/leaderboards/tiny/facets", headers=headers).status_code == 200
        for state, sid in board.dead.items():
            urls = [f"/api/v1/results/{sid}", f"/api/v1/results/{sid}/records/set0"]
            if headers:  # the status endpoint needs a token: another user's is a 404
                urls.append(f"/api/v1/submissions/{sid}")
            for url in urls:
                response = client.get(url, headers=headers)
                assert response.status_code == 404, (state, url)
                assert response.json()["message"].endswith("does not exist or is not yours")
            compare = client.get(
                "/api/v1/leaderboards/tiny/compare",
                params={"ids": f"{board.good},{sid}"},
                headers=headers,
            )
            assert compare.status_code == 404, state
    # the finished entry stays public
    assert client.get(f"/api/v1/results/{board.good}").status_code == 200


def test_public_pages_never_show_them(client: TestClient, board: Board) -> None:
    for url in ("/", "/leaderboards/tiny", "/datasets"):
        html = client.get(url).text
        assert "dead-" not in html, url
    for sid in board.dead.values():
        assert client.get(f"/models/{sid}").status_code == 404
        assert client.get(f"/compare?id={board.good}&id={sid}").status_code == 404
    assert "good-net" in client.get("/leaderboards/tiny").text


def test_owner_sees_them_with_the_reason(client: TestClient, actors: Actors, board: Board) -> None:
    failed = board.dead["failed"]
    status = client.get(f"/api/v1/submissions/{failed}", headers=actors.alice).json()
    assert status["state"] == "failed" and status["reason"] == "dataset_unavailable"
    assert status["message"] == FAILED_MESSAGE
    assert client.get(f"/api/v1/results/{failed}", headers=actors.alice).json()["state"] == (
        "failed"
    )
    mine = client.get("/api/v1/submissions", headers=actors.alice).json()
    listed = {s["id"]: s for s in mine["items"]}
    assert {board.good, *board.dead.values()} <= set(listed)
    assert listed[board.dead["rejected"]]["reason"] == "state_dict_mismatch"
    token = actors.alice["Authorization"].removeprefix("Bearer ")
    client.cookies.set(COOKIE_NAME, token)
    try:
        page = unescape(client.get(f"/submissions/{failed}").text)
        assert "dataset_unavailable" in page and FAILED_MESSAGE in page
        own = unescape(client.get("/submissions").text)
        assert "dead-failed" in own and "dead-rejected" in own
        assert "weights do not fit cifar_resnet20" in own  # the reason, not just its code
    finally:
        client.cookies.clear()
