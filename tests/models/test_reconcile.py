"""The reconciler (issue 19 §5): the database decides what work exists; what nothing runs is sent
again, recorded shards never are, and a shard that keeps losing its worker fails the run with the
history of its attempts. SQLite and (integration) PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy.orm import Session

from models.core.settings import Settings
from models.db.base import utcnow
from models.db.entities import ShardDispatch
from models.db.states import Reason, SubmissionState
from models.runs import shards
from models.runs.reconcile import reconcile, release_node
from models.submissions import lifecycle as pipeline
from models.submissions.intake import create_submission
from tests.support.service_factories import load_tiny, make_user, record_shard, upload

S = SubmissionState


@pytest.fixture
def submission_id(session: Session, settings: Settings) -> int:
    benchmark = load_tiny(session)
    user, _ = make_user(session, "alice")
    return create_submission(
        session, user=user, benchmark=benchmark, upload=upload(), settings=settings
    ).id


def _to(session: Session, sid: int, settings: Settings, *targets: SubmissionState) -> None:
    state = S.SUBMITTED
    for target in targets:
        assert pipeline.transition(
            session, sid, from_states={state}, to_state=target, settings=settings
        )
        state = target


def _running_with_dispatch(session: Session, sid: int, settings: Settings) -> list:
    _to(session, sid, settings, S.VALIDATING, S.QUEUED, S.RUNNING)
    plan = shards.plan(session, sid, settings=settings)
    shards.mark_dispatched(session, sid, plan)
    return plan


def test_nothing_to_do_while_work_is_fresh(session: Session, settings: Settings, submission_id):
    _running_with_dispatch(session, submission_id, settings)
    assert not reconcile(session, settings=settings)


def test_lost_messages_are_sent_again_but_recorded_shards_never(
    session: Session, settings: Settings, submission_id: int
):
    plan = _running_with_dispatch(session, submission_id, settings)
    assert record_shard(session, submission_id, plan[0], settings=settings)
    later = utcnow() + timedelta(seconds=settings.reconcile_after_seconds + 1)
    actions = reconcile(session, settings=settings, now=later)
    assert [spec.key for _, spec in actions.shards] == [plan[1].key]  # not the recorded one
    row = session.get(ShardDispatch, (submission_id, *plan[1].key))
    assert row.dispatches == 2 and row.dispatched_at == later
    assert not reconcile(session, settings=settings, now=later)  # sent again: wait again


def test_a_live_claim_is_not_sent_again(session: Session, settings: Settings, submission_id):
    plan = _running_with_dispatch(session, submission_id, settings)
    assert shards.claim(session, submission_id, plan[0], worker="w1", settings=settings) is None
    assert shards.claim(session, submission_id, plan[0], worker="w2", settings=settings) == "w1"
    later = utcnow() + timedelta(seconds=settings.reconcile_after_seconds + 1)
    actions = reconcile(session, settings=settings, now=later)
    assert [spec.key for _, spec in actions.shards] == [plan[1].key]


def test_an_expired_claim_is_resent_then_fails_the_run_with_its_history(
    session: Session, settings: Settings, submission_id: int
):
    plan = _running_with_dispatch(session, submission_id, settings)
    now = utcnow()
    for attempt in range(1, settings.max_shard_attempts + 1):
        worker = f"gpu{attempt}"
        assert shards.claim(session, submission_id, plan[0], worker=worker, settings=settings,
                            now=now) is None  # fmt: skip
        now += timedelta(seconds=settings.lease_seconds + 1)
        actions = reconcile(session, settings=settings, now=now)
        if attempt < settings.max_shard_attempts:
            assert plan[0].key in [spec.key for _, spec in actions.shards]
            row = session.get(ShardDispatch, (submission_id, *plan[0].key))
            assert row.expired_claims == attempt and row.claimed_by is None
            assert [h["worker"] for h in row.history] == [f"gpu{i}" for i in range(1, attempt + 1)]
            assert pipeline.get_state(session, submission_id) == S.RUNNING
    assert actions.failed == [submission_id]
    submission = pipeline.get_submission(session, submission_id)
    assert submission.state == S.FAILED and submission.reason == Reason.LEASE_EXPIRED
    assert f"lost its worker {settings.max_shard_attempts} times" in submission.message
    assert all(f"gpu{i}" in submission.message for i in range(1, settings.max_shard_attempts + 1))


def test_all_shards_recorded_but_no_aggregate(session: Session, settings: Settings, submission_id):
    plan = _running_with_dispatch(session, submission_id, settings)
    for spec in plan:
        assert record_shard(session, submission_id, spec, settings=settings)
    later = utcnow() + timedelta(seconds=settings.reconcile_after_seconds + 1)
    actions = reconcile(session, settings=settings, now=later)
    assert actions.aggregate == [submission_id] and not actions.shards


def test_submitted_and_queued_rows_whose_message_is_gone_are_validated_again(
    session: Session, settings: Settings, submission_id: int
):
    later = utcnow() + timedelta(seconds=settings.reconcile_after_seconds + 1)
    assert reconcile(session, settings=settings, now=later).validate == [submission_id]
    _to(session, submission_id, settings, S.VALIDATING, S.QUEUED)  # dispatch never ran
    later = utcnow() + timedelta(seconds=settings.reconcile_after_seconds + 1)
    assert reconcile(session, settings=settings, now=later).validate == [submission_id]


def test_validation_that_lost_its_worker_is_retried_then_failed(
    session: Session, settings: Settings, submission_id: int
):
    _to(session, submission_id, settings, S.VALIDATING)
    now = utcnow()
    for _ in range(settings.max_shard_attempts):
        now += timedelta(seconds=settings.lease_seconds + 1)
        assert reconcile(session, settings=settings, now=now).validate == [submission_id]
    now += timedelta(seconds=settings.lease_seconds + 1)
    assert reconcile(session, settings=settings, now=now).failed == [submission_id]
    assert pipeline.get_state(session, submission_id) == S.FAILED


def test_a_backlog_is_not_multiplied_by_the_sweeps(session: Session, settings: Settings):
    """Issue 27 §5: shards whose messages wait behind a backlog (no worker takes them) draw at
    most one re-send per shard and lease period after the first, not one per
    ``reconcile_after``: over 5 lease periods of sweeps every 30 s, 10 submissions' shards."""
    settings = settings.model_copy(
        update={"reconcile_after_seconds": 60, "lease_seconds": 300, "quota_concurrent": 100,
                "quota_submissions_per_day": 100}
    )  # fmt: skip
    benchmark = load_tiny(session)
    user, _ = make_user(session, "alice")
    planned = []
    for i in range(10):
        sid = create_submission(
            session, user=user, benchmark=benchmark, upload=upload(seed=i), settings=settings
        ).id
        planned += [(sid, spec.key) for spec in _running_with_dispatch(session, sid, settings)]
    start, sweeps, periods = utcnow(), 50, 5
    resent: dict[tuple, list[int]] = {}
    for sweep in range(1, sweeps + 1):
        now = start + timedelta(seconds=30 * sweep)
        for sid, spec in reconcile(session, settings=settings, now=now).shards:
            resent.setdefault((sid, spec.key), []).append(sweep)
    assert set(resent) == set(planned)  # every message counted as lost was sent again
    for key, when in resent.items():
        assert len(when) <= 1 + periods, (key, when)
        assert when[0] == 2  # the first re-send still comes after reconcile_after (60 s)
    last_period = [s for when in resent.values() for s in when if s > sweeps - 10]
    assert len(last_period) <= len(planned)  # the queue does not grow


def test_a_starting_worker_releases_the_leases_of_its_node(
    session: Session, settings: Settings, submission_id: int
):
    """Issue 27 §5: a worker restarted under the same node name ends the claims its dead
    process held; the next sweep re-sends them at once instead of after the lease."""
    plan = _running_with_dispatch(session, submission_id, settings)
    node = "certbench-auto@host_1"
    assert shards.claim(session, submission_id, plan[0], worker=f"{node}/4242",
                        settings=settings) is None  # fmt: skip
    assert (
        shards.claim(
            session, submission_id, plan[1], worker="certbench-auto@hostX1/7", settings=settings
        )
        is None
    )  # fmt: skip (another node; `_` is no wildcard)
    soon = utcnow() + timedelta(seconds=1)
    assert not reconcile(session, settings=settings, now=soon).shards  # both leases alive
    assert release_node(session, node) == 1
    actions = reconcile(session, settings=settings, now=utcnow() + timedelta(seconds=1))
    assert [spec.key for _, spec in actions.shards] == [plan[0].key]
    row = session.get(ShardDispatch, (submission_id, *plan[0].key))
    session.refresh(row)
    assert row.expired_claims == 1 and row.history[-1]["worker"] == f"{node}/4242"
    other = session.get(ShardDispatch, (submission_id, *plan[1].key))
    session.refresh(other)
    assert other.claimed_by == "certbench-auto@hostX1/7"
