"""Planning and recording shards, for every stage alike.

The plan is deterministic (every worker computes the same one from the database and the shard
sizes), so a shard is named by (stage, unit, shard index) alone. Recording is exactly-once: the
unique key on ``stage_shards`` decides, so redelivered tasks and resumed submissions neither
duplicate nor lose work. A worker's claim on a shard is its fencing token: a worker records its
result only while it still holds the claim, in the transaction that releases it, so a worker cut
off past its lease (whose shard the reconciler gave to another) cannot store its late result.
Progress (per stage and per unit, ``models.runs.progress``) is computed from the same rows and
from the running shards' counts on their dispatch rows.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

from sqlalchemy import CursorResult, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from models.core.errors import ConflictError, StorageError
from models.core.settings import Settings
from models.db.base import utcnow
from models.db.entities import ShardDispatch, StageShard
from models.runs import progress
from models.stages import registry
from models.stages.base import ShardSpec, Stage
from models.stages.work import WorkItem, get_work_item
from models.submissions import lifecycle as pipeline
from models.submissions import storage
from models.submissions.lifecycle import get_submission


def stages_of(item: WorkItem) -> list[Stage]:
    """The registered stages this submission's benchmark runs, in registry order."""
    return registry.enabled_stages(item)


def plan_item(item: WorkItem, settings: Settings, *, stage: str | None = None) -> list[ShardSpec]:
    """Every shard of the submission (or of one stage): each unit tiled by its stage's size."""
    plan = []
    for current in stages_of(item):
        if stage is not None and current.name != stage:
            continue
        size = current.shard_size(settings)
        for unit in current.units(item, settings):
            plan += [
                ShardSpec(current.name, unit.name, index, start, min(start + size, unit.num_images))
                for index, start in enumerate(range(0, unit.num_images, size))
            ]
    return plan


def plan(
    session: Session, submission_id: int, *, settings: Settings, stage: str | None = None
) -> list[ShardSpec]:
    """The submission's shards (optionally of one stage); stores ``shards_total`` (all stages)."""
    full = plan_item(get_work_item(session, submission_id, settings=settings), settings)
    pipeline.set_shards_total(session, submission_id, len(full))
    return [spec for spec in full if stage is None or spec.stage == stage]


def find(session: Session, submission_id: int, key: tuple[str, str, int], *, settings: Settings
         ) -> ShardSpec | None:  # fmt: skip
    """The planned shard named ``key`` = (stage, unit, shard index), or None."""
    return next((s for s in plan(session, submission_id, settings=settings) if s.key == key), None)


def recorded(session: Session, submission_id: int, *, stage: str | None = None) -> list[StageShard]:
    """Shards already recorded (optionally of one stage), by stage, unit and index."""
    query = select(StageShard).where(StageShard.submission_id == submission_id)
    if stage is not None:
        query = query.where(StageShard.stage == stage)
    return list(
        session.scalars(query.order_by(StageShard.stage, StageShard.unit, StageShard.shard_index))
    )


def missing(
    session: Session, submission_id: int, *, settings: Settings, stage: str | None = None
) -> list[ShardSpec]:
    """The planned shards not yet recorded (what a resumed submission still has to run)."""
    done = {(s.stage, s.unit, s.shard_index) for s in recorded(session, submission_id)}
    return [
        spec
        for spec in plan(session, submission_id, settings=settings, stage=stage)
        if spec.key not in done
    ]


class ClaimLostError(ConflictError):
    """A worker's claim on a shard lapsed (or was given to another worker) before it recorded
    the shard: its result is refused, not stored."""

    code = "claim_lost"


def records_relpath(submission_id: int, spec: ShardSpec) -> str:
    """Where a shard's per-image records are written (relative to the artifacts dir)."""
    folder = registry.get(spec.stage).folder(spec.unit)
    return storage.shard_records_relpath(submission_id, folder, spec.shard_index)


def record(
    session: Session,
    *,
    submission_id: int,
    spec: ShardSpec,
    count: int,
    seconds: float,
    records_path: str,
    worker: str | None = None,
    settings: Settings,
    attempt: Path | None = None,
) -> bool:
    """Record a finished shard whose records file is already written (atomically).

    Returns True when newly recorded, False when it was recorded already (redelivery); the unique
    constraint decides, so concurrent duplicates are safe. Sets its dispatch row's counts to the
    shard's images and forward passes (what this fleet's throughput is measured on), updates the
    submission's progress and renews its lease. Raises StorageError if the records file is
    missing.

    ``attempt`` (a worker's run: its records written there, not at ``records_path``) fences the
    recording by ``worker``'s claim: in one transaction the claim is released only if ``worker``
    still holds it with its lease running (the row stays locked until the commit, so the
    reconciler cannot give it away meanwhile), the shard is inserted, and the file is moved to
    ``records_path``. A lost claim raises ClaimLostError and the attempt's file is deleted, so
    neither the row nor the file of a late result is stored.
    """
    written = attempt or storage.resolve(settings.artifacts_dir, records_path)
    if not written.is_file():
        raise StorageError(
            f"records file {records_path!r} for submission {submission_id} shard "
            f"{spec.key} does not exist: write it before recording the shard"
        )
    if attempt is not None:
        _fence(session, submission_id, spec.key, worker=worker, attempt=attempt)
    row = StageShard(
        submission_id=submission_id,
        stage=spec.stage,
        unit=spec.unit,
        shard_index=spec.shard_index,
        start=spec.start,
        stop=spec.stop,
        count=count,
        seconds=seconds,
        records_path=records_path,
        worker=worker,
    )
    session.add(row)
    try:
        session.flush()
        if attempt is not None:
            os.replace(attempt, storage.resolve(settings.artifacts_dir, records_path))
        session.commit()
    except IntegrityError:
        session.rollback()
        if attempt is not None:
            attempt.unlink(missing_ok=True)
        return False
    cost = progress.unit_cost(session, submission_id, spec.stage, spec.unit, settings=settings)
    final = {"images_done": spec.size, "samples_done": cost.passes(spec.start, spec.stop)}
    session.execute(_dispatch_update(submission_id, spec.key).values(**final, updated_at=utcnow()))
    session.commit()
    refresh_progress(session, submission_id, settings=settings)
    pipeline.heartbeat(session, submission_id, settings=settings, worker=worker)
    return True


def _fence(session: Session, submission_id: int, key: tuple[str, str, int], *,
           worker: str | None, attempt: Path) -> None:  # fmt: skip
    """Release ``worker``'s live claim in the open transaction, or refuse: ClaimLostError."""
    if worker is None:
        raise ValueError("recording an attempt needs the worker that holds the claim")
    released = _rows_updated(
        session,
        _dispatch_update(submission_id, key)
        .where(ShardDispatch.claimed_by == worker, ShardDispatch.claimed_until > utcnow())
        .values(claimed_by=None, claimed_until=None),
    )
    if released == 1:
        return
    session.rollback()
    attempt.unlink(missing_ok=True)
    row = _dispatch_row(session, submission_id, key)
    holder = row.claimed_by if row is not None else None
    if holder == worker:
        why = "its lease on the claim ran out"
    elif holder:
        why = f"the claim is held by {holder} now"
    else:
        why = "the claim lapsed and the shard was sent again"
    raise ClaimLostError(
        f"{worker} no longer holds its claim on shard {key} of submission {submission_id} "
        f"({why}): its result is not stored"
    )


def done_count(session: Session, submission_id: int) -> int:
    """How many shards of the submission are recorded (every stage)."""
    return int(
        session.scalar(
            select(func.count())
            .select_from(StageShard)
            .where(StageShard.submission_id == submission_id)
        )
        or 0
    )


def refresh_progress(session: Session, submission_id: int, *, settings: Settings) -> None:
    """Write ``shards_done`` and the fraction of the work done (``models.runs.progress``)."""
    submission = get_submission(session, submission_id)
    submission.shards_done = done_count(session, submission_id)
    session.commit()
    progress.refresh(session, submission_id, settings=settings)


def all_recorded(session: Session, submission_id: int) -> bool:
    """Whether every planned shard (every stage) is recorded."""
    submission = get_submission(session, submission_id)
    return bool(submission.shards_total) and done_count(session, submission_id) >= (
        submission.shards_total
    )


def check_complete(
    shards: Sequence[StageShard], num_images: int, *, what: str, settings: Settings
) -> None:
    """Refuse to merge unless the shards tile ``[0, num_images)`` and their files exist.

    Raises StorageError naming the first gap or the missing file.
    """
    position = 0
    for start, stop in sorted((s.start, s.stop) for s in shards):
        if start != position:
            break
        position = stop
    if position != num_images:
        raise StorageError(
            f"{what} has shards covering images [0, {position}) of {num_images}; run the "
            "missing shards before aggregating"
        )
    for shard in shards:
        if not storage.resolve(settings.artifacts_dir, shard.records_path).is_file():
            raise StorageError(f"records file {shard.records_path!r} of a recorded shard is gone")


# ---- dispatches and claims: what the broker was asked to run, and who runs it -----------------


def _dispatch_row(
    session: Session, submission_id: int, key: tuple[str, str, int]
) -> ShardDispatch | None:
    stage, unit, index = key
    return session.get(ShardDispatch, (submission_id, stage, unit, index), populate_existing=True)


def _dispatch_update(submission_id: int, key: tuple[str, str, int]) -> Any:
    """An UPDATE of one dispatch row (add ``.where`` and ``.values``)."""
    stage, unit, index = key
    return (
        update(ShardDispatch)
        .where(
            ShardDispatch.submission_id == submission_id,
            ShardDispatch.stage == stage,
            ShardDispatch.unit == unit,
            ShardDispatch.shard_index == index,
        )
        .execution_options(synchronize_session=False)
    )


def mark_dispatched(
    session: Session, submission_id: int, specs: Sequence[ShardSpec], *, now: datetime | None = None
) -> None:
    """Note that messages for ``specs`` are (about to be) sent: before sending, so a message the
    broker never got is still found by the reconciler."""
    now = now or utcnow()
    for spec in specs:
        row = _dispatch_row(session, submission_id, spec.key)
        if row is None:
            session.add(
                ShardDispatch(
                    submission_id=submission_id,
                    stage=spec.stage,
                    unit=spec.unit,
                    shard_index=spec.shard_index,
                    dispatched_at=now,
                    dispatches=1,
                    expired_claims=0,
                    history=[],
                )
            )
        else:
            row.dispatched_at = now
            row.dispatches += 1
    try:
        session.commit()
    except IntegrityError:  # another dispatcher inserted the same rows first: theirs stand
        session.rollback()


def claim(
    session: Session,
    submission_id: int,
    spec: ShardSpec,
    *,
    worker: str,
    settings: Settings,
    now: datetime | None = None,
) -> str | None:
    """Claim a shard for ``worker`` under a lease. Returns None when claimed, else the worker
    that holds a live claim (a duplicate message must not compute the shard a second time)."""
    now = now or utcnow()
    if _dispatch_row(session, submission_id, spec.key) is None:
        mark_dispatched(session, submission_id, [spec], now=now)
    stage, unit, index = spec.key
    where = (
        (ShardDispatch.submission_id == submission_id)
        & (ShardDispatch.stage == stage)
        & (ShardDispatch.unit == unit)
        & (ShardDispatch.shard_index == index)
    )
    taken = _rows_updated(
        session,
        update(ShardDispatch)
        .where(
            where,
            (ShardDispatch.claimed_until.is_(None))
            | (ShardDispatch.claimed_until < now)
            | (ShardDispatch.claimed_by == worker),
        )
        .values(
            claimed_by=worker,
            claimed_until=now + timedelta(seconds=settings.lease_seconds),
            images_done=0,
            samples_done=0,
            started_at=now,
            updated_at=now,
        )
        .execution_options(synchronize_session=False),
    )
    session.commit()
    if taken == 1:
        return None
    holder = session.scalar(select(ShardDispatch.claimed_by).where(where))
    return holder or "another worker"


def renew_claim(
    session: Session, submission_id: int, key: tuple[str, str, int], *, worker: str,
    settings: Settings,
) -> bool:  # fmt: skip
    """Extend ``worker``'s claim (heartbeat). False when the claim was taken from it."""
    renewed = _rows_updated(
        session,
        update(ShardDispatch)
        .where(*ShardDispatch.held(submission_id, key, worker))
        .values(claimed_until=utcnow() + timedelta(seconds=settings.lease_seconds))
        .execution_options(synchronize_session=False),
    )
    session.commit()
    return renewed == 1


def _rows_updated(session: Session, statement: Any) -> int:
    """The rows an UPDATE changed: ``Session.execute`` types its result as a ``Result``, an
    UPDATE's is a ``CursorResult``, the one that carries ``rowcount``."""
    return cast("CursorResult[Any]", session.execute(statement)).rowcount


def release_claim(
    session: Session, submission_id: int, key: tuple[str, str, int], *, worker: str
) -> None:
    """Drop ``worker``'s claim (the shard was recorded, stopped or failed)."""
    session.execute(
        update(ShardDispatch)
        .where(*ShardDispatch.held(submission_id, key, worker))
        .values(claimed_by=None, claimed_until=None)
        .execution_options(synchronize_session=False)
    )
    session.commit()


def note_attempt(
    session: Session, submission_id: int, key: tuple[str, str, int], entry: dict[str, Any]
) -> None:
    """Append how an attempt on the shard ended (``outcome``: cancelled, failed, ...) to its
    dispatch row's history, next to the lost workers the reconciler notes there."""
    row = _dispatch_row(session, submission_id, key)
    if row is not None:
        row.history = [*row.history, entry]
        session.commit()


def dispatches(session: Session, submission_id: int) -> dict[tuple[str, str, int], ShardDispatch]:
    """The dispatch rows of a submission by shard key."""
    rows = session.scalars(
        select(ShardDispatch).where(ShardDispatch.submission_id == submission_id)
    )
    return {(r.stage, r.unit, r.shard_index): r for r in rows}


def recorded_keys(session: Session, submission_ids: set[int]) -> list[StageShard]:
    """Recorded shards of several submissions (for the reconciler)."""
    if not submission_ids:
        return []
    return list(
        session.scalars(select(StageShard).where(StageShard.submission_id.in_(submission_ids)))
    )
