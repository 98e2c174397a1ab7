"""Leases: the heartbeat thread renews them, cancellation stops a shard mid-way, the watchdog
fails runs whose lease expired."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from sqlalchemy import update

from models.db.base import utcnow
from models.db.entities import ShardDispatch, Submission
from models.db.states import Reason, SubmissionState
from models.runs import shards
from models.submissions import lifecycle as pipeline
from models.submissions import storage
from tests.support import timing
from tests.support.workers import create_submission, manifest, tiny_model, weights_bytes
from workers.app import app
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
        deadline = time.monotonic() + timing.seconds(30)
        while lease.beats < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    assert lease.beats >= 2 and not lease.lost.is_set()
    row = _row(session, running)
    assert row.lease_expires_at > before and row.worker == "w1/1"
    assert row.lease_expires_at - row.heartbeat_at == timedelta(seconds=settings.lease_seconds)


def _claimed_lease(settings, session, sid: int, **kw) -> ShardLease:
    """A lease on the first shard (1 image, 20 forward passes), claimed by w1/1."""
    spec = shards.plan(session, sid, settings=settings)[0]
    assert shards.claim(session, sid, spec, worker="w1/1", settings=settings) is None
    return ShardLease(settings, sid, worker="w1/1", shard_images=spec.size, shard_key=spec.key,
                      samples=lambda done: 20 * done, **kw)  # fmt: skip


def _cancel(session, sid: int) -> None:
    assert pipeline.transition(
        session, sid, from_states={S.RUNNING}, to_state=S.CANCELLED,
        reason=Reason.CANCELLED_BY_USER.value, message="cancelled by alice",
    )  # fmt: skip


def test_progress_is_written_then_a_cancel_stops_the_shard_saying_so(settings, session, running):
    lease = _claimed_lease(settings, session, running, cancel_check_seconds=0.0)
    with lease:
        lease.on_record(None)  # still running: the shard's counts and the fraction are written
        row = session.get(ShardDispatch, (running, *lease.shard_key), populate_existing=True)
        assert (row.images_done, row.samples_done) == (1, 20)
        assert row.updated_at >= row.started_at
        # 4 shards of 1 image × (n0 4 + n 16): 20 of 80 forward passes
        assert _row(session, running).progress == pytest.approx(20 / 80)
        _cancel(session, running)
        with pytest.raises(ShardCancelled, match="was cancelled \\(cancelled by alice\\)") as stop:
            lease.on_record(None)
    assert lease.lost.is_set() and stop.value.outcome == "cancelled"


def test_heartbeat_notices_a_cancelled_run_and_says_cancelled(settings, session, running):
    settings = settings.model_copy(update={"heartbeat_seconds": 1})
    _cancel(session, running)
    lease = ShardLease(settings, running, worker="w1/1", shard_images=1, cancel_check_seconds=60)
    with lease:
        assert lease.lost.wait(timeout=timing.seconds(30))
        with pytest.raises(ShardCancelled, match="cancelled by alice") as stop:
            lease.on_record(None)
    assert stop.value.outcome == "cancelled"
    assert "lease" not in str(stop.value)


def test_a_run_failed_by_the_watchdog_is_told_apart(settings, session, running):
    lease = _claimed_lease(settings, session, running, cancel_check_seconds=0.0)
    assert pipeline.fail(
        session, running, reason=Reason.LEASE_EXPIRED.value, message="shard 1 lost its worker"
    )
    with lease, pytest.raises(ShardCancelled, match="failed by the watchdog") as stop:
        lease.on_record(None)
    assert stop.value.outcome == "failed" and "lease_expired" in str(stop.value)


def test_a_shard_another_worker_took_over_or_finished_is_told_apart(settings, session, running):
    lease = _claimed_lease(settings, session, running, cancel_check_seconds=60)
    spec = shards.plan(session, running, settings=settings)[0]
    session.execute(
        update(ShardDispatch)
        .where(ShardDispatch.submission_id == running)
        .values(claimed_by="w2/7")  # the reconciler gave the lapsed claim to w2
    )
    session.commit()
    lease.lost.set()  # what the heartbeat thread concludes when renewing the claim fails
    with pytest.raises(ShardCancelled, match="gave it to w2/7") as stop:
        lease.on_progress(1)
    assert stop.value.outcome == "taken_over"
    relpath = shards.records_relpath(running, spec)  # w2 wrote its records and recorded them
    path = storage.resolve(settings.artifacts_dir, relpath)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"records")
    assert shards.record(session, submission_id=running, spec=spec, count=1, seconds=0.1,
                         records_path=relpath, worker="w2/7", settings=settings)  # fmt: skip
    with pytest.raises(ShardCancelled, match="recorded by w2/7") as stop:
        lease.on_progress(1)
    assert stop.value.outcome == "finished_elsewhere"


def test_watchdog_resends_a_shard_whose_worker_died_then_fails_with_history(
    settings, session, running
):
    """Issue 19 §5: a lapsed shard claim is re-sent (not the whole run failed at once); after
    max_shard_attempts lost workers the run fails and names them."""
    assert sweep(settings, app) == []
    spec = shards.plan(session, running, settings=settings)[0]
    for attempt in range(1, settings.max_shard_attempts + 1):
        assert shards.claim(session, running, spec, worker=f"w{attempt}", settings=settings) is None
        session.execute(
            update(ShardDispatch)
            .where(ShardDispatch.submission_id == running)
            .values(claimed_until=utcnow() - timedelta(seconds=1))
        )
        session.commit()
        thread = WatchdogThread(app, settings, interval=0.1)
        thread.start()
        deadline = time.monotonic() + timing.seconds(30)
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
    assert sweep(settings, app) == []  # idempotent
