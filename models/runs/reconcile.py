"""The reconciler: the database says what work exists; find what nothing is running and send it
again (issue "survive a broker that loses its messages").

The broker only carries wake-ups. Every sweep (the watchdog's) compares the database with what is
in flight and returns the messages to re-send; it never recomputes a recorded shard (recording is
exactly-once) and a re-sent message for a shard another worker holds a live claim on is skipped
by that task. What it looks for:

- a shard whose worker stopped heartbeating (its claim expired): sent again at once; after
  ``max_shard_attempts`` lost workers the submission fails with the history of those attempts;
- a planned shard neither recorded, claimed, nor sent within ``reconcile_after_seconds`` (its
  message was lost, or never sent): sent again; if still unclaimed, again after a lease period,
  then after twice, four and eight times that (``resend_wait``): a message merely waiting behind
  a backlog is not multiplied into the queue at every sweep;
- a running submission with every shard recorded but no ``aggregate`` for that long: aggregate;
- a ``submitted`` or ``queued`` submission untouched for that long (its validate message was lost,
  or dispatch died half-way): validate again (idempotent per state);
- a ``validating`` submission whose lease expired: validate again, at most
  ``max_shard_attempts`` times, then failed.

A worker that starts releases the claims held under its own node name (``release_node``): the
process that held them is gone (Celery refuses two live nodes of one name), so its shards are
sent again by the next sweep instead of waiting out the lease (900 s by default).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from models.core.settings import Settings
from models.db.base import utcnow
from models.db.engine import rows_matched
from models.db.entities import ShardDispatch, Submission
from models.db.states import Reason, SubmissionState
from models.runs import shards
from models.stages.base import ShardSpec
from models.submissions import lifecycle as pipeline

S = SubmissionState


@dataclass
class Actions:
    """Messages to send (by the caller, which owns the broker) and what was failed."""

    validate: list[int] = field(default_factory=list)
    shards: list[tuple[int, ShardSpec]] = field(default_factory=list)
    aggregate: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.validate or self.shards or self.aggregate or self.failed)


def reconcile(session: Session, *, settings: Settings, now: datetime | None = None) -> Actions:
    """One sweep; marks what it re-sends as dispatched (so the next sweep waits again)."""
    now = now or utcnow()
    actions = Actions()
    stale = now - timedelta(seconds=settings.reconcile_after_seconds)
    _expired_claims(session, actions, settings=settings, now=now)
    for submission_id, state, updated_at in session.execute(
        select(Submission.id, Submission.state, Submission.updated_at)
        .where(Submission.state.in_({S.SUBMITTED, S.VALIDATING, S.QUEUED, S.RUNNING}))
        .order_by(Submission.id)
    ).all():
        if submission_id in actions.failed:
            continue
        if state == S.VALIDATING:
            _validation(session, submission_id, actions, settings=settings, now=now)
        elif state == S.SUBMITTED and updated_at < stale:
            _touch(session, submission_id, now)
            actions.validate.append(submission_id)
        elif state in (S.QUEUED, S.RUNNING):
            _shards(session, submission_id, state, updated_at, actions, settings=settings,
                    now=now, stale=stale)  # fmt: skip
    return actions


def release_node(session: Session, node: str, *, now: datetime | None = None) -> int:
    """End the leases held under Celery node ``node`` (claims are ``<node>/<pid>``): its shard
    claims and validation leases now count as expired, so the next sweep re-sends that work
    with the lost attempt in the shard's history. Call it when a worker of that node starts,
    before it takes work. Returns the number of leases ended."""
    now = now or utcnow()
    mine = f"{node}/"
    claims = rows_matched(
        session,
        update(ShardDispatch)
        .where(
            ShardDispatch.claimed_by.startswith(mine, autoescape=True),
            ShardDispatch.claimed_until > now,
        )
        .values(claimed_until=now)
        .execution_options(synchronize_session=False),
    )
    validations = rows_matched(
        session,
        update(Submission)
        .where(
            Submission.state == S.VALIDATING,
            Submission.worker.startswith(mine, autoescape=True),
            Submission.lease_expires_at > now,
        )
        .values(lease_expires_at=now)
        .execution_options(synchronize_session=False),
    )
    session.commit()
    return claims + validations


def _expired_claims(session: Session, actions: Actions, *, settings: Settings, now: datetime
                    ) -> None:  # fmt: skip
    """A claim that outlived its lease: its worker died (or hangs) mid-shard."""
    rows = session.scalars(
        select(ShardDispatch)
        .join(Submission, Submission.id == ShardDispatch.submission_id)
        .where(
            ShardDispatch.claimed_until.is_not(None),
            ShardDispatch.claimed_until < now,
            Submission.state == S.RUNNING,
        )
        .execution_options(populate_existing=True)  # claims are written by UPDATEs elsewhere
    ).all()
    recorded = shards.recorded_keys(session, {row.submission_id for row in rows})
    done = {(r.submission_id, r.stage, r.unit, r.shard_index) for r in recorded}
    for row in rows:
        key = (row.stage, row.unit, row.shard_index)
        if (row.submission_id, *key) in done:
            row.claimed_by, row.claimed_until = None, None
            continue
        expired_at = row.claimed_until
        assert expired_at is not None  # the query selects claims with a lease end
        row.history = [
            *row.history,
            {"worker": row.claimed_by, "lease_expired_at": expired_at.isoformat()},
        ]
        row.expired_claims += 1
        row.claimed_by, row.claimed_until = None, None
        if row.expired_claims >= settings.max_shard_attempts:
            session.commit()
            _give_up(session, row, settings=settings)
            actions.failed.append(row.submission_id)
            continue
        row.dispatched_at, row.dispatches = now, row.dispatches + 1
        actions.shards.append((row.submission_id, _spec(session, row, settings)))
    session.commit()


def _spec(session: Session, row: ShardDispatch, settings: Settings) -> ShardSpec:
    key = (row.stage, row.unit, row.shard_index)
    spec = shards.find(session, row.submission_id, key, settings=settings)
    return spec or ShardSpec(row.stage, row.unit, row.shard_index, 0, 0)


def _give_up(session: Session, row: ShardDispatch, *, settings: Settings) -> None:
    attempts = "; ".join(
        f"{h['worker'] or 'unknown worker'} (lease expired {h['lease_expired_at']})"
        for h in row.history
        if "lease_expired_at" in h  # not the attempts that stopped on purpose (cancelled, ...)
    )
    label = f"{row.stage} shard {row.shard_index}" + (f" of {row.unit!r}" if row.unit else "")
    pipeline.fail(
        session,
        row.submission_id,
        reason=Reason.LEASE_EXPIRED.value,
        message=f"{label} lost its worker {row.expired_claims} times (CERTBENCH_MAX_SHARD_"
        f"ATTEMPTS={settings.max_shard_attempts}): {attempts}. The shard may crash or exhaust "
        "its worker; an admin can re-run the submission (recorded shards are kept).",
    )


def _validation(session: Session, submission_id: int, actions: Actions, *, settings: Settings,
                now: datetime) -> None:  # fmt: skip
    submission = session.get(Submission, submission_id)
    if submission is None or submission.lease_expires_at is None:
        return
    if submission.lease_expires_at >= now:
        return
    if submission.recoveries >= settings.max_shard_attempts:
        pipeline.fail(
            session,
            submission_id,
            reason=Reason.LEASE_EXPIRED.value,
            message=f"validation lost its worker {submission.recoveries + 1} times; the upload "
            "may crash the worker. An admin can re-run it.",
        )
        actions.failed.append(submission_id)
        return
    session.execute(
        update(Submission)
        .where(Submission.id == submission_id, Submission.state == S.VALIDATING)
        .values(
            recoveries=Submission.recoveries + 1,
            lease_expires_at=now + timedelta(seconds=settings.lease_seconds),
        )
        .execution_options(synchronize_session=False)
    )
    session.commit()
    actions.validate.append(submission_id)


def _shards(
    session: Session,
    submission_id: int,
    state: SubmissionState,
    updated_at: datetime,
    actions: Actions,
    *,
    settings: Settings,
    now: datetime,
    stale: datetime,
) -> None:
    """Missing shards nobody runs or was sent recently; or a run with nothing left to merge."""
    missing = shards.missing(session, submission_id, settings=settings)
    sent = shards.dispatches(session, submission_id)

    def lost(spec: ShardSpec) -> bool:
        row = sent.get(spec.key)
        if row is None:  # never sent (dispatch died half-way, or a run from before 0006)
            return updated_at < stale
        return row.claimed_by is None and row.dispatched_at < now - resend_wait(row, settings)

    lost_specs = [spec for spec in missing if lost(spec)]
    if lost_specs:
        if state == S.QUEUED and not sent:
            # dispatch never ran to completion: let validate (idempotent in queued) do it
            _touch(session, submission_id, now)
            actions.validate.append(submission_id)
            return
        shards.mark_dispatched(session, submission_id, lost_specs, now=now)
        actions.shards += [(submission_id, spec) for spec in lost_specs]
    elif not missing and state == S.RUNNING:
        submission = session.get(Submission, submission_id)
        if submission is None:  # deleted since the sweep listed it: nothing to aggregate
            return
        last = max(t for t in (updated_at, submission.heartbeat_at) if t is not None)
        if last < stale:
            _touch(session, submission_id, now)
            actions.aggregate.append(submission_id)


def resend_wait(row: ShardDispatch, settings: Settings) -> timedelta:
    """How long an unclaimed shard's last message may wait before it counts as lost.

    The first message gets ``reconcile_after_seconds`` (a broker that lost it is noticed
    soon). Each re-send of a message no worker took is the same shard queued once more, so the
    next waits a lease period (at least ``reconcile_after``), then 2, 4, 8 times that: under a
    backlog the queue holds at most about one extra message per shard and lease period, instead
    of one per shard and ``reconcile_after`` (issue 27 §5: 22 shards drew 137 re-sends in 60 s).
    Re-sends after a worker's claim expired are not counted (``expired_claims``): that message
    was taken.
    """
    resends = row.dispatches - 1 - row.expired_claims
    base = settings.reconcile_after_seconds
    if resends <= 0:
        return timedelta(seconds=base)
    period = max(settings.lease_seconds, base)
    return timedelta(seconds=period * 2 ** min(resends - 1, 3))


def _touch(session: Session, submission_id: int, now: datetime) -> None:
    """Restart the clock of a submission the reconciler acted on."""
    session.execute(
        update(Submission)
        .where(Submission.id == submission_id)
        .values(updated_at=now)
        .execution_options(synchronize_session=False)
    )
    session.commit()
