"""The board counter and the in-memory board snapshots (issue 27 §1).

A leaderboard page is served from a per-process snapshot of its board; these tests hold that a
snapshot never outlives a committed change of what a board shows (a new entry, moderation, an
owner's rename, a Core UPDATE of a board column, a change committed by another session), that
the running shards' progress and lease updates do not throw snapshots away, and that a
rolled-back change moves nothing.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import inspect, update
from sqlalchemy.orm import Session

from models.boards import snapshots as board_index
from models.boards.leaderboard import LeaderboardQuery, leaderboard
from models.catalog.benchmarks import get_benchmark, parse_definition, upsert_benchmark
from models.core.errors import NotFoundError
from models.core.settings import Settings
from models.db import board_version
from models.db.engine import session_scope
from models.db.entities import Submission, User
from models.submissions.intake import create_submission
from models.submissions.queries import set_moderation
from tests.support.service_factories import (
    finished_submission,
    load_tiny,
    make_user,
    tiny_definition,
    upload,
)


@pytest.fixture
def board(session: Session, settings: Settings) -> tuple[User, list[int]]:
    load_tiny(session)
    alice, _ = make_user(session, "alice")
    tiny = get_benchmark(session, "tiny")
    ids = [
        finished_submission(
            session,
            user=alice,
            benchmark=tiny,
            settings=settings,
            seed=seed,
            quality=quality,
            name=f"net-{seed}",
        )
        for seed, quality in ((1, 0.3), (2, 0.8), (3, 0.5))
    ]
    return alice, ids


def _page(session: Session, **query: object) -> list[tuple[int, str, str]]:
    page = leaderboard(
        session, get_benchmark(session, "tiny"), LeaderboardQuery(**query), viewer=None
    )  # type: ignore[arg-type]
    return [(r.submission_id, r.model_name, r.owner) for r in page.rows]


def test_the_counter_moves_with_board_changes_only(
    session: Session, settings: Settings, board: tuple[User, list[int]]
) -> None:
    alice, ids = board
    before = board_version.current(session)
    session.execute(update(Submission).where(Submission.id == ids[0]).values(progress=0.5))
    session.commit()
    assert board_version.current(session) == before  # a running shard's progress: no change
    tiny = get_benchmark(session, "tiny")
    create_submission(session, user=alice, benchmark=tiny, upload=upload(seed=9),
                      settings=settings)  # fmt: skip
    assert board_version.current(session) == before  # a new upload is on no board yet

    session.execute(update(Submission).where(Submission.id == ids[0]).values(flagged=True))
    session.commit()
    flagged = board_version.current(session)
    assert flagged[1] == before[1] + 1 and flagged[0] == before[0]

    alice.name = "alice-renamed"
    session.rollback()  # nothing committed: nothing moves
    assert board_version.current(session) == flagged
    alice.name = "alice-renamed"
    session.commit()
    assert board_version.current(session)[1] == flagged[1] + 1


def test_a_snapshot_follows_every_committed_change(
    session: Session, settings: Settings, board: tuple[User, list[int]]
) -> None:
    alice, ids = board
    first = _page(session)
    assert [i for i, _, _ in first] == [ids[1], ids[2], ids[0]]  # mACR descending
    assert _page(session) == first  # a repeated read comes from the same snapshot

    set_moderation(session, ids[1], hidden=True)
    assert [i for i, _, _ in _page(session)] == [ids[2], ids[0]]

    alice.name = "alice-renamed"
    session.commit()
    assert {owner for _, _, owner in _page(session)} == {"alice-renamed"}

    with session_scope(settings) as other:  # another session (another API process alike)
        other.execute(
            update(Submission).where(Submission.id == ids[0]).values(model_name="renamed")
        )
        other.commit()
    session.commit()  # end this session's read transaction: see the other's commit
    assert (ids[0], "renamed", "alice-renamed") in _page(session)

    tiny = get_benchmark(session, "tiny")
    newest = finished_submission(session, user=alice, benchmark=tiny, settings=settings,
                                 seed=4, quality=0.95, name="net-4")  # fmt: skip
    assert _page(session)[0][0] == newest


def test_a_database_emptied_under_the_same_url_is_not_served_from_an_old_snapshot(
    session: Session, settings: Settings, board: tuple[User, list[int]]
) -> None:
    assert len(_page(session)) == 3
    version = board_version.current(session)
    session.query(board_version.BoardVersion).delete()  # as a TRUNCATE of every table would
    session.commit()
    assert board_version.current(session) == (None, 0)
    alice = session.get(User, board[0].id)
    assert alice is not None
    alice.name = "someone"
    session.commit()
    epoch, count = board_version.current(session)
    assert count == 1 and epoch != version[0]  # a fresh, random epoch


def test_sorts_put_unmeasured_entries_last_and_break_ties_by_id() -> None:
    import numpy as np

    values = np.array([0.5, np.nan, 0.9, 0.5, np.nan, 0.1])
    assert board_index._sorted(values, "desc").tolist() == [2, 0, 3, 5, 1, 4]
    assert board_index._sorted(values, "asc").tolist() == [5, 0, 3, 2, 1, 4]
    names = np.array(["b", "a", None, "b", "C"], dtype=object)
    assert board_index._sorted(names, "asc").tolist() == [4, 1, 0, 3, 2]  # code points: "C" < "a"
    assert board_index._sorted(names, "desc").tolist() == [0, 3, 1, 4, 2]


def test_the_benchmark_is_read_once_per_counter_and_never_detaches_the_callers_object(
    session: Session, settings: Settings, board: tuple[User, list[int]]
) -> None:
    mine = get_benchmark(session, "tiny")
    first, version = board_index.benchmark_named(session, "tiny")
    again, _ = board_index.benchmark_named(session, "tiny")
    assert again is first and first is not mine
    assert inspect(first).detached and not inspect(mine).detached  # the caller's stays usable
    assert [t.name for t in first.test_sets] == [t.name for t in mine.test_sets]

    upsert_benchmark(session, parse_definition(json.dumps(tiny_definition(version=2))))
    session.commit()
    reloaded, moved = board_index.benchmark_named(session, "tiny")
    assert moved != version and reloaded is not first and reloaded.definition_version == 2
    with pytest.raises(NotFoundError, match="tiny"):
        board_index.benchmark_named(session, "tinny")
