"""Two aggregates of one submission at once (two workers' control consumers, each sent one by a
shard that found every shard recorded) finish it exactly once and keep its leaderboard entry
(issue 34 §1: control work runs on its own consumer per worker, so such pairs can now overlap).

Both aggregates are held at the same point, after their state check and before either stores,
by a barrier around the real ``merge_stage``; then they race to store and to move the state.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models.core.settings import Settings
from models.db.engine import session_scope
from models.db.entities import LeaderboardEntry, StageResult, SubmissionEvent
from models.db.states import SubmissionState
from models.runs import results
from models.runs import shards as shard_store
from models.submissions import lifecycle as pipeline
from models.submissions.intake import create_submission
from tests.support import timing
from tests.support.service_factories import load_tiny, make_user, record_shard, upload

S = SubmissionState


def _running_with_every_shard(session: Session, settings: Settings) -> int:
    benchmark = load_tiny(session)
    user, _ = make_user(session, "alice")
    sid = create_submission(
        session, user=user, benchmark=benchmark, upload=upload(), settings=settings
    ).id
    for source, target in ((S.SUBMITTED, S.VALIDATING), (S.VALIDATING, S.QUEUED),
                           (S.QUEUED, S.RUNNING)):  # fmt: skip
        assert pipeline.transition(
            session, sid, from_states={source}, to_state=target, settings=settings
        )
    for spec in shard_store.plan(session, sid, settings=settings):
        record_shard(session, sid, spec, settings=settings)
    return sid


def _held_merge(barrier: threading.Barrier) -> Callable[..., Any]:
    real = results.merge_stage

    def merge_stage(*args: Any, **kwargs: Any) -> Any:
        barrier.wait(timeout=timing.seconds(60))
        return real(*args, **kwargs)

    return merge_stage


def test_two_concurrent_aggregates_finish_once_and_keep_the_entry(
    session: Session, settings: Settings, monkeypatch: pytest.MonkeyPatch
):
    sid = _running_with_every_shard(session, settings)
    monkeypatch.setattr(results, "merge_stage", _held_merge(threading.Barrier(2)))
    outcomes: list[bool] = []
    errors: list[BaseException] = []

    def aggregate() -> None:
        try:
            with session_scope(settings) as own:
                outcomes.append(results.complete_submission(own, sid, settings=settings))
        except BaseException as err:  # reported below, with the other thread's outcome
            errors.append(err)

    threads = [threading.Thread(target=aggregate) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timing.seconds(120))
    assert not errors, errors
    assert sorted(outcomes) == [False, True]  # exactly one moved the state
    session.expire_all()
    assert pipeline.get_state(session, sid) == S.FINISHED
    assert session.get(LeaderboardEntry, sid) is not None
    stored = session.scalar(
        select(func.count()).select_from(StageResult).where(StageResult.submission_id == sid)
    )
    assert stored == 2  # one result per test set, not two
    finished = session.scalar(
        select(func.count())
        .select_from(SubmissionEvent)
        .where(SubmissionEvent.submission_id == sid, SubmissionEvent.to_state == S.FINISHED)
    )
    assert finished == 1
