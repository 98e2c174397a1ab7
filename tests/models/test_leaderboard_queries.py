"""Leaderboard queries: sorting, filters, search, paging, visibility, protocol version."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from models.boards.leaderboard import LeaderboardQuery, leaderboard, results_of
from models.core.errors import IntakeError
from models.core.settings import Settings
from models.db.entities import Role, Submission
from models.submissions.queries import set_moderation
from tests.support.service_factories import finished_submission, load_tiny, make_user


@pytest.fixture
def board(session: Session, settings: Settings) -> dict:
    benchmark = load_tiny(session)
    alice, _ = make_user(session, "alice")
    bob, _ = make_user(session, "bob")
    ids = {
        "weak": finished_submission(
            session, user=alice, benchmark=benchmark, settings=settings, seed=1, quality=1 / 3,
            name="weak-net",
        ),
        "mid": finished_submission(
            session, user=bob, benchmark=benchmark, settings=settings, seed=2, quality=2 / 3,
            name="mid-net", sigma=0.5,
        ),
        "best": finished_submission(
            session, user=alice, benchmark=benchmark, settings=settings, seed=3, quality=1.0,
            name="best-net", extra_data=True, venue="NeurIPS",
        ),
        "private": finished_submission(
            session, user=bob, benchmark=benchmark, settings=settings, seed=4, quality=1.0,
            name="secret-net", private=True,
        ),
    }  # fmt: skip
    return {"benchmark": benchmark, "alice": alice, "bob": bob, "ids": ids}


def names(page) -> list[str]:
    return [row.model_name for row in page.rows]


def test_sort_order_and_ranks(session: Session, board: dict):
    page = leaderboard(session, board["benchmark"], LeaderboardQuery(), viewer=None)
    assert names(page) == ["best-net", "mid-net", "weak-net"]
    assert [r.rank for r in page.rows] == [1, 2, 3] and page.total == 3
    macrs = [r.figures["macr"] for r in page.rows]
    assert macrs == sorted(macrs, reverse=True) and macrs[0] > macrs[-1]
    asc = leaderboard(
        session, board["benchmark"], LeaderboardQuery(sort="abstain_rate", order="asc"),
        viewer=None,
    )  # fmt: skip
    assert names(asc) == ["best-net", "mid-net", "weak-net"]
    by_name = leaderboard(
        session, board["benchmark"], LeaderboardQuery(sort="model_name", order="asc"), viewer=None
    )
    assert names(by_name) == ["best-net", "mid-net", "weak-net"]


def test_filters_search_and_paging(session: Session, board: dict):
    bench = board["benchmark"]
    assert names(leaderboard(session, bench, LeaderboardQuery(sigma=0.5), viewer=None)) == [
        "mid-net"
    ]
    assert names(leaderboard(session, bench, LeaderboardQuery(extra_data=True), viewer=None)) == [
        "best-net"
    ]
    assert names(leaderboard(session, bench, LeaderboardQuery(venue="NeurIPS"), viewer=None)) == [
        "best-net"
    ]
    assert names(leaderboard(session, bench, LeaderboardQuery(search="WEAK"), viewer=None)) == [
        "weak-net"
    ]
    assert names(leaderboard(session, bench, LeaderboardQuery(search="bob"), viewer=None)) == [
        "mid-net"
    ]
    second = leaderboard(session, bench, LeaderboardQuery(offset=1, limit=1), viewer=None)
    assert names(second) == ["mid-net"] and second.rows[0].rank == 2 and second.total == 3
    other = leaderboard(session, bench, LeaderboardQuery(protocol_version="v0"), viewer=None)
    assert other.total == 0


def test_private_and_hidden_entries(session: Session, board: dict, settings: Settings):
    bench = board["benchmark"]
    admin, _ = make_user(session, "root", Role.ADMIN)
    assert "secret-net" not in names(leaderboard(session, bench, LeaderboardQuery(), viewer=None))
    owner_view = leaderboard(session, bench, LeaderboardQuery(), viewer=board["bob"])
    assert "secret-net" in names(owner_view)
    assert "secret-net" not in names(
        leaderboard(session, bench, LeaderboardQuery(), viewer=board["alice"])
    )
    assert leaderboard(session, bench, LeaderboardQuery(), viewer=admin).total == 4
    set_moderation(session, board["ids"]["best"], hidden=True)
    set_moderation(session, board["ids"]["mid"], flagged=True, flag_reason="suspicious")
    public = leaderboard(session, bench, LeaderboardQuery(), viewer=None)
    assert names(public) == ["mid-net", "weak-net"]
    assert public.rows[0].flag_reason == "suspicious"
    flagged = leaderboard(session, bench, LeaderboardQuery(flagged=False), viewer=None)
    assert names(flagged) == ["weak-net"]


def test_unknown_sort_and_results(session: Session, board: dict):
    with pytest.raises(IntakeError, match=r"not a sort key of benchmark .*valid keys: macr, "):
        leaderboard(session, board["benchmark"], LeaderboardQuery(sort="nope"), viewer=None)
    page = leaderboard(session, board["benchmark"], LeaderboardQuery(limit=1), viewer=None)
    results = results_of(session, session.get_one(Submission, page.rows[0].submission_id))
    assert [r.test_set.name for r in results] == ["set0", "set1"]
