"""Leases: the heartbeat thread renews them, cancellation stops a shard mid-way, the watchdog
fails runs whose lease expired."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from sqlalchemy import update
from support import create_submission, manifest, tiny_model, weights_bytes

from models import pipeline, shards
from models.base import utcnow
from models.entities import ShardDispatch, Submission
from models.states import Reason, SubmissionState
from workers.errors import ShardCancelled
from workers.lease import ShardLease
from workers.watchdog import WatchdogThread, sweep

S = SubmissionState


@pytest.fixture
def running(settings, session, benchmark, tmp_path) -> int:
    """A submission moved by hand to ``running`` (lease started), as the first shard would."""
    sid = create_submission(
        session, settings, weights=weights_bytes(tiny_model(), tmp_path), manifest_doc=manifest()
    )
    for source, target in ((S.SUBMITTED, S.VALIDATING), (S.VALIDATING, S.QUEUED),
                           (S.QUEUED, S.RUNNING)):  # fmt: skip
        assert pipeline.transition(
            session, sid, from_states={source}, to_state=target, settings=settings
        )
    shards.plan(session, sid, settings=settings)
    return sid


def _row(session, sid: int) -> Submission:
    session.expire_all()
    return session.get(Submission, sid)


def test_heartbeat_thread_renews_the_lease_while_a_shard_runs(settings, session, running):
    settings = settings.model_copy(update={"heartbeat_seconds": 1})
    before = _row(session, running).lease_expires_at
    lease = ShardLease(settings, running, worker="w1/1", shard_images=1, cancel_check_seconds=60)
    with lease:
        deadline = time.monotonic() + 30
        while lease.beats < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    assert lease.beats >= 2 and not lease.lost.is_set()
    row = _row(session, running)
    assert row.lease_expires_at > before and row.worker == "w1/1"
    assert row.lease_expires_at - row.heartbeat_at == timedelta(seconds=settings.lease_seconds)


def test_cancel_between_images_raises_and_stops_the_shard(settings, session, running):
    lease = ShardLease(settings, running, worker="w1/1", shard_images=4, cancel_check_seconds=0.0)
    with lease:
        lease.on_record(None)  # still running: progress written, no exception
        assert _row(session, running).progress == pytest.approx(
            1 / 4 / 4
        )  # 1 of 4 images, 4 shards
        assert pipeline.transition(
            session, running, from_states={S.RUNNING}, to_state=S.CANCELLED,
            reason=Reason.CANCELLED_BY_USER.value,
        )  # fmt: skip
        with pytest.raises(ShardCancelled, match="no longer running"):
            lease.on_record(None)
    assert lease.lost.is_set()


def test_heartbeat_notices_a_cancelled_run(settings, session, running):
    settings = settings.model_copy(update={"heartbeat_seconds": 1})
    assert pipeline.transition(
        session, running, from_states={S.RUNNING}, to_state=S.CANCELLED,
        reason=Reason.CANCELLED_BY_USER.value,
    )  # fmt: skip
    lease = ShardLease(settings, running, worker="w1/1", shard_images=1, cancel_check_seconds=60)
    with lease:
        assert lease.lost.wait(timeout=30)
        with pytest.raises(ShardCancelled, match="lost its lease"):
            lease.on_record(None)


def test_watchdog_resends_a_shard_whose_worker_died_then_fails_with_history(
    settings, session, running
):
    """Issue 19 §5: a lapsed shard claim is re-sent (not the whole run failed at once); after
    max_shard_attempts lost workers the run fails and names them."""
    assert sweep(settings) == []
    spec = shards.plan(session, running, settings=settings)[0]
    for attempt in range(1, settings.max_shard_attempts + 1):
        assert shards.claim(session, running, spec, worker=f"w{attempt}", settings=settings) is None
        session.execute(
            update(ShardDispatch)
            .where(ShardDispatch.submission_id == running)
            .values(claimed_until=utcnow() - timedelta(seconds=1))
        )
        session.commit()
        thread = WatchdogThread(settings, interval=0.1)
        thread.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            row = session.get(ShardDispatch, (running, *spec.key), populate_existing=True)
            if row.expired_claims == attempt:
                break
            time.sleep(0.1)
        thread.stop()
        assert thread.sweeps >= 1 and row.expired_claims == attempt
    row = _row(session, running)
    assert row.state == S.FAILED and row.reason == Reason.LEASE_EXPIRED
    assert "lost its worker" in row.message and "w1" in row.message
    assert sweep(settings) == []  # idempotent
