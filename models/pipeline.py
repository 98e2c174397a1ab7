"""Persistence functions the certification pipeline (the Celery workers) calls.

Workers pass submission ids, never ORM objects; every function re-reads what it needs and commits
its own unit of work. State changes go through ``transition``: a compare-and-set UPDATE guarded by
``TRANSITIONS``, so a cancel by the user and a worker finishing never both win. Shard results are
keyed by (submission, test set, shard index): recording one twice is a no-op, so redelivered tasks
and resumed submissions neither duplicate nor lose work.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from models import artifacts, storage
from models.base import utcnow
from models.entities import (
    LeaderboardEntry,
    Result,
    RobustnessResult,
    RobustnessShard,
    Shard,
    Submission,
    SubmissionEvent,
    TestSet,
)
from models.errors import InvalidTransitionError, NotFoundError, StorageError
from models.settings import Settings
from models.states import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    TRANSITIONS,
    Reason,
    SubmissionState,
    can_transition,
)

S = SubmissionState
#: States that hold a worker lease (the watchdog fails them when it expires).
LEASED_STATES = frozenset({S.VALIDATING, S.RUNNING})


@dataclass(frozen=True)
class TestSetSpec:
    """How to load one test set (arguments of ``certbench.data.load_images``)."""

    __test__ = False

    id: int
    name: str
    source: str
    config: str | None
    revision: str | None
    split: str
    subset_skip: int
    subset_limit: int | None
    num_images: int


@dataclass(frozen=True)
class RobustnessSpec:
    """The robustness stage of a benchmark (``models.catalog.RobustnessProtocol``), resolved:
    ``images`` is the attacked clean subset, ``anchors_path`` the bank file (built from the
    same source's ``anchors_split`` when absent); ``protocol`` the stored row it came from."""

    images: TestSetSpec
    anchors_path: Path
    anchors_split: str
    k: int
    anchor_seed: int
    eps: tuple[int, ...]
    n_iter: int
    n_target_classes: int
    projection: str
    weighting: str
    protocol: dict[str, Any]

    def describe(self) -> dict[str, Any]:
        """The settings stored with the result: the benchmark's protocol without local paths."""
        return {key: value for key, value in self.protocol.items() if key != "folder"}


@dataclass(frozen=True)
class WorkItem:
    """Everything a worker needs to validate and certify one submission."""

    submission_id: int
    state: SubmissionState
    attempt: int
    benchmark: str
    num_classes: int
    sigma: float
    n0: int
    n: int
    alpha: float
    seed: int
    protocol_version: str
    manifest: dict[str, Any]
    weights_path: Path | None
    test_sets: tuple[TestSetSpec, ...]
    robustness: RobustnessSpec | None = None


@dataclass(frozen=True)
class ShardSpec:
    """Images ``[start, stop)`` (positions in the test set's protocol subset) of one shard."""

    test_set_id: int
    test_set: str
    shard_index: int
    start: int
    stop: int


def get_submission(session: Session, submission_id: int) -> Submission:
    """The submission row. Raises NotFoundError."""
    submission = session.get(Submission, submission_id)
    if submission is None:
        raise NotFoundError(f"submission {submission_id} does not exist")
    return submission


def dataset_source(test_set: TestSet, settings: Settings) -> str:
    """A local folder when the definition names one (relative ones under datasets_dir), else the
    Hub repo id."""
    return _source(test_set.dataset_folder, test_set.dataset_repo, settings)


def _source(folder: str | None, repo: str, settings: Settings) -> str:
    if folder:
        path = Path(folder)
        if not path.is_absolute() and settings.datasets_dir is not None:
            path = settings.datasets_dir / path
        return str(path)
    return repo


def robustness_spec(protocol: dict[str, Any] | None, settings: Settings) -> RobustnessSpec | None:
    """Resolve a benchmark's stored robustness protocol against this deployment's folders."""
    if protocol is None:
        return None
    assert settings.anchors_dir is not None  # filled by Settings' validator
    return RobustnessSpec(
        images=TestSetSpec(
            id=0,
            name=storage.ROBUSTNESS,
            source=_source(protocol.get("folder"), protocol["repo"], settings),
            config=protocol.get("config"),
            revision=protocol.get("revision"),
            split=protocol["split"],
            subset_skip=protocol["subset_skip"],
            subset_limit=protocol["subset_limit"],
            num_images=protocol["num_images"],
        ),
        anchors_path=settings.anchors_dir / protocol["anchors"],
        anchors_split=protocol["anchors_split"],
        k=protocol["k"],
        anchor_seed=protocol["anchor_seed"],
        eps=tuple(protocol["eps"]),
        n_iter=protocol["n_iter"],
        n_target_classes=protocol["n_target_classes"],
        projection=protocol["projection"],
        weighting=protocol["weighting"],
        protocol=dict(protocol),
    )


def get_work_item(session: Session, submission_id: int, *, settings: Settings) -> WorkItem:
    """Snapshot of a submission for a worker. Raises NotFoundError."""
    submission = get_submission(session, submission_id)
    benchmark = submission.benchmark
    artifact = submission.artifact
    weights = (
        storage.resolve(settings.artifacts_dir, artifact.weights_path)
        if artifact.weights_path
        else None
    )
    specs = tuple(
        TestSetSpec(
            id=ts.id,
            name=ts.name,
            source=dataset_source(ts, settings),
            config=ts.config,
            revision=ts.revision,
            split=ts.split,
            subset_skip=ts.subset_skip,
            subset_limit=ts.subset_limit,
            num_images=ts.num_images,
        )
        for ts in benchmark.test_sets
    )
    return WorkItem(
        submission_id=submission.id,
        state=submission.state,
        attempt=submission.attempt,
        benchmark=benchmark.name,
        num_classes=benchmark.num_classes,
        sigma=submission.sigma,
        n0=benchmark.n0,
        n=benchmark.n,
        alpha=benchmark.alpha,
        seed=benchmark.seed,
        protocol_version=submission.protocol_version,
        manifest=dict(artifact.manifest),
        weights_path=weights,
        test_sets=specs,
        robustness=robustness_spec(benchmark.robustness, settings),
    )


def get_state(session: Session, submission_id: int) -> SubmissionState:
    """Current state, read fresh from the database (not from the session's identity map)."""
    state = session.execute(
        select(Submission.state).where(Submission.id == submission_id)
    ).scalar_one_or_none()
    if state is None:
        raise NotFoundError(f"submission {submission_id} does not exist")
    return state


def transition(
    session: Session,
    submission_id: int,
    *,
    from_states: Iterable[SubmissionState],
    to_state: SubmissionState,
    reason: str | None = None,
    message: str = "",
    worker: str | None = None,
    settings: Settings | None = None,
) -> bool:
    """Move a submission to ``to_state`` iff it is currently in one of ``from_states``.

    Returns False (and changes nothing) when the state moved meanwhile, e.g. the user cancelled;
    callers then stop quietly. Raises InvalidTransitionError when a listed move is illegal (a bug
    in the caller, not a race). Entering validating/running starts a lease of
    ``settings.lease_seconds`` (``settings`` required then); terminal states set ``finished_at``.
    """
    sources = frozenset(from_states)
    illegal = sorted(str(s) for s in sources if not can_transition(s, to_state))
    if illegal or not sources:
        raise InvalidTransitionError(
            f"cannot move a submission from {illegal or 'no state'} to {to_state}; legal targets: "
            + "; ".join(f"{s} → {sorted(map(str, TRANSITIONS[s]))}" for s in sorted(sources))
        )
    now = utcnow()
    values: dict[str, Any] = {
        "state": to_state,
        "reason": reason,
        "message": message,
        "updated_at": now,
    }
    if worker is not None:
        values["worker"] = worker
    if to_state in LEASED_STATES:
        if settings is None:
            raise InvalidTransitionError(f"entering {to_state} starts a lease: pass settings=")
        values["heartbeat_at"] = now
        values["lease_expires_at"] = now + timedelta(seconds=settings.lease_seconds)
    else:
        values["lease_expires_at"] = None
    if to_state == S.RUNNING:
        values["started_at"] = func.coalesce(Submission.started_at, now)
    if to_state in TERMINAL_STATES:
        values["finished_at"] = now
    if to_state == S.SUBMITTED:
        values.update(finished_at=None, started_at=None, heartbeat_at=None, worker=None)
        values["attempt"] = Submission.attempt + 1
    old_state = get_state(session, submission_id)
    result = session.execute(
        update(Submission)
        .where(Submission.id == submission_id, Submission.state.in_(sources))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:
        session.rollback()
        return False
    session.add(
        SubmissionEvent(
            submission_id=submission_id,
            at=now,
            from_state=old_state if old_state in sources else None,
            to_state=to_state,
            reason=reason,
            message=message,
        )
    )
    session.commit()
    session.expire_all()
    return True


def heartbeat(
    session: Session, submission_id: int, *, settings: Settings, worker: str | None = None
) -> bool:
    """Renew the lease of a validating/running submission.

    Returns False when the submission is no longer leased (cancelled, failed by the watchdog,
    finished): the caller must stop working on it. This is also the cancel check between shards.
    """
    now = utcnow()
    values: dict[str, Any] = {
        "heartbeat_at": now,
        "lease_expires_at": now + timedelta(seconds=settings.lease_seconds),
    }
    if worker is not None:
        values["worker"] = worker
    result = session.execute(
        update(Submission)
        .where(Submission.id == submission_id, Submission.state.in_(LEASED_STATES))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return result.rowcount == 1


def should_continue(session: Session, submission_id: int) -> bool:
    """True while the submission still wants work (not cancelled, failed or finished)."""
    return get_state(session, submission_id) in ACTIVE_STATES


def is_cancelled(session: Session, submission_id: int) -> bool:
    """True once the owner or an admin cancelled the submission."""
    return get_state(session, submission_id) == S.CANCELLED


def plan_shards(session: Session, submission_id: int, *, settings: Settings) -> list[ShardSpec]:
    """All certify shards of a submission (test set × image range of ``settings.shard_size``).

    Deterministic, so every worker computes the same plan; also stores ``shards_total``, which
    counts the robustness shards too.
    """
    submission = get_submission(session, submission_id)
    size = settings.shard_size
    plan = [
        ShardSpec(ts.id, ts.name, index, start, min(start + size, ts.num_images))
        for ts in submission.benchmark.test_sets
        for index, start in enumerate(range(0, ts.num_images, size))
    ]
    robustness = _plan_robustness(submission, settings)
    submission.shards_total = len(plan) + len(robustness)
    session.commit()
    return plan


def _plan_robustness(submission: Submission, settings: Settings) -> list[ShardSpec]:
    protocol = submission.benchmark.robustness
    if protocol is None:
        return []
    size, total = settings.robustness_shard_size or settings.shard_size, protocol["num_images"]
    return [
        ShardSpec(0, storage.ROBUSTNESS, index, start, min(start + size, total))
        for index, start in enumerate(range(0, total, size))
    ]


def plan_robustness_shards(
    session: Session, submission_id: int, *, settings: Settings
) -> list[ShardSpec]:
    """The robustness shards (image ranges of the clean subset); empty without that stage."""
    return _plan_robustness(get_submission(session, submission_id), settings)


def finished_robustness_shards(session: Session, submission_id: int) -> list[RobustnessShard]:
    """Robustness shards already recorded for this submission."""
    return list(
        session.scalars(
            select(RobustnessShard)
            .where(RobustnessShard.submission_id == submission_id)
            .order_by(RobustnessShard.shard_index)
        )
    )


def missing_robustness_shards(
    session: Session, submission_id: int, *, settings: Settings
) -> list[ShardSpec]:
    """The planned robustness shards not yet recorded."""
    done = {s.shard_index for s in finished_robustness_shards(session, submission_id)}
    return [
        spec
        for spec in plan_robustness_shards(session, submission_id, settings=settings)
        if spec.shard_index not in done
    ]


def all_shards_recorded(session: Session, submission_id: int) -> bool:
    """Whether every planned shard (certify and robustness) is recorded."""
    submission = get_submission(session, submission_id)
    return bool(submission.shards_total) and _shards_done(session, submission_id) >= (
        submission.shards_total
    )


def finished_shards(session: Session, submission_id: int) -> list[Shard]:
    """Shards already recorded for this submission (a resumed run skips these)."""
    return list(
        session.scalars(
            select(Shard)
            .where(Shard.submission_id == submission_id)
            .order_by(Shard.test_set_id, Shard.shard_index)
        )
    )


def record_shard(
    session: Session,
    *,
    submission_id: int,
    test_set_id: int,
    shard_index: int,
    start: int,
    stop: int,
    count: int,
    seconds: float,
    records_path: str,
    worker: str | None = None,
    settings: Settings,
) -> bool:
    """Record a finished certify shard whose records file is already written (atomically) at
    ``records_path`` (relative, from ``storage.shard_records_relpath``).

    Returns True when newly recorded, False when this shard was already recorded (redelivery);
    the unique constraint decides, so concurrent duplicates are safe. Updates progress and renews
    the lease. Raises StorageError if the records file is missing.
    """
    row = Shard(
        submission_id=submission_id,
        test_set_id=test_set_id,
        shard_index=shard_index,
        start=start,
        stop=stop,
        count=count,
        seconds=seconds,
        records_path=records_path,
        worker=worker,
    )
    return _record_once(session, row, settings=settings)


def record_robustness_shard(
    session: Session,
    *,
    submission_id: int,
    shard_index: int,
    start: int,
    stop: int,
    count: int,
    seconds: float,
    records_path: str,
    worker: str | None = None,
    settings: Settings,
) -> bool:
    """``record_shard`` for a robustness shard (``storage.robustness_shard_relpath``)."""
    row = RobustnessShard(
        submission_id=submission_id,
        shard_index=shard_index,
        start=start,
        stop=stop,
        count=count,
        seconds=seconds,
        records_path=records_path,
        worker=worker,
    )
    return _record_once(session, row, settings=settings)


def _record_once(session: Session, row: Shard | RobustnessShard, *, settings: Settings) -> bool:
    if not storage.resolve(settings.artifacts_dir, row.records_path).is_file():
        raise StorageError(
            f"records file {row.records_path!r} for submission {row.submission_id} shard "
            f"{row.shard_index} does not exist: write it before recording the shard"
        )
    session.add(row)
    submission_id, worker = row.submission_id, row.worker
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        return False
    _refresh_progress(session, submission_id)
    heartbeat(session, submission_id, settings=settings, worker=worker)
    return True


def _shards_done(session: Session, submission_id: int) -> int:
    return sum(
        int(
            session.scalar(
                select(func.count()).select_from(table).where(table.submission_id == submission_id)
            )
            or 0
        )
        for table in (Shard, RobustnessShard)
    )


def check_shards_complete(
    shards: Sequence[Shard | RobustnessShard], num_images: int, *, what: str, settings: Settings
) -> None:
    """Refuse to aggregate unless the shards tile ``[0, num_images)`` and their files exist.

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


def _refresh_progress(session: Session, submission_id: int) -> None:
    done = _shards_done(session, submission_id)
    submission = get_submission(session, submission_id)
    submission.shards_done = done
    total = submission.shards_total
    submission.progress = min(1.0, submission.shards_done / total) if total else 0.0
    session.commit()


def missing_shards(session: Session, submission_id: int, *, settings: Settings) -> list[ShardSpec]:
    """The planned shards not yet recorded (what a resumed submission still has to run)."""
    done = {(s.test_set_id, s.shard_index) for s in finished_shards(session, submission_id)}
    return [
        spec
        for spec in plan_shards(session, submission_id, settings=settings)
        if (spec.test_set_id, spec.shard_index) not in done
    ]


def fail(session: Session, submission_id: int, *, reason: str, message: str) -> bool:
    """Mark an active submission failed (infrastructure/runtime trouble). False if not active."""
    return transition(
        session,
        submission_id,
        from_states=ACTIVE_STATES,
        to_state=S.FAILED,
        reason=reason,
        message=message,
    )


def reject(
    session: Session, submission_id: int, *, reason: str, message: str, settings: Settings
) -> bool:
    """Reject an unusable upload and delete its stored weights (unless a submission of any
    artifact sharing the file may still need it). False if the submission was no longer
    submitted/validating."""
    moved = transition(
        session,
        submission_id,
        from_states={S.SUBMITTED, S.VALIDATING},
        to_state=S.REJECTED,
        reason=reason,
        message=message,
    )
    if moved:
        artifact_id = get_submission(session, submission_id).artifact_id
        release_artifact(session, artifact_id, settings=settings)
    return moved


def release_artifact(session: Session, artifact_id: int, *, settings: Settings) -> bool:
    """Delete an artifact's weights file when no submission that may still need it references it,
    counting every artifact that shares the file (``models.artifacts.release_artifact``).

    Returns True when the file was deleted. The metadata row stays (sha256, size, manifest).
    """
    return artifacts.release_artifact(session, artifact_id, settings=settings)


def expired_leases(session: Session, *, now: datetime | None = None) -> list[int]:
    """Ids of validating/running submissions whose lease expired (the watchdog's query)."""
    now = now or utcnow()
    return list(
        session.scalars(
            select(Submission.id)
            .where(
                Submission.state.in_(LEASED_STATES),
                Submission.lease_expires_at.is_not(None),
                Submission.lease_expires_at < now,
            )
            .order_by(Submission.id)
        )
    )


def fail_expired_leases(session: Session, *, now: datetime | None = None) -> list[int]:
    """Fail every submission whose lease expired; returns the ids actually failed.

    The lease is re-checked inside the guarded update, so a heartbeat that lands in between wins.
    """
    now = now or utcnow()
    failed = []
    for submission_id in expired_leases(session, now=now):
        submission = get_submission(session, submission_id)
        state, heartbeat_at = submission.state, submission.heartbeat_at
        message = (
            f"no heartbeat from worker {submission.worker or '(unknown)'} since "
            f"{heartbeat_at.isoformat() if heartbeat_at else 'start'} while {state}; "
            "the worker probably died. An admin can re-run it; finished shards are kept."
        )
        result = session.execute(
            update(Submission)
            .where(
                Submission.id == submission_id,
                Submission.state == state,
                Submission.lease_expires_at < now,
            )
            .values(
                state=S.FAILED,
                reason=Reason.LEASE_EXPIRED.value,
                message=message,
                finished_at=now,
                updated_at=now,
                lease_expires_at=None,
            )
            .execution_options(synchronize_session=False)
        )
        if result.rowcount == 1:
            session.add(
                SubmissionEvent(
                    submission_id=submission_id,
                    at=now,
                    from_state=state,
                    to_state=S.FAILED,
                    reason=Reason.LEASE_EXPIRED.value,
                    message=message,
                )
            )
            failed.append(submission_id)
        session.commit()
    session.expire_all()
    return failed


def reset_for_rerun(
    session: Session, submission_id: int, *, fresh: bool, settings: Settings, message: str = ""
) -> bool:
    """Send a finished/failed/rejected/cancelled submission back to ``submitted``.

    ``fresh`` drops recorded shards, results and the leaderboard entry (and their files);
    otherwise finished shards are kept and the run resumes. False if the state did not allow it.
    """
    artifact = get_submission(session, submission_id).artifact
    if artifact.weights_path is None:
        raise InvalidTransitionError(
            f"submission {submission_id} cannot be re-run: its weights were deleted when it was "
            "rejected; the submitter has to upload them again",
            code="weights_deleted",
        )
    moved = transition(
        session,
        submission_id,
        from_states={S.FINISHED, S.FAILED, S.REJECTED, S.CANCELLED},
        to_state=S.SUBMITTED,
        reason=Reason.RERUN.value,
        message=message or "re-run requested by an admin",
    )
    if not moved:
        return False
    session.execute(delete(LeaderboardEntry).where(LeaderboardEntry.submission_id == submission_id))
    session.execute(delete(Result).where(Result.submission_id == submission_id))
    session.execute(delete(RobustnessResult).where(RobustnessResult.submission_id == submission_id))
    if fresh:
        session.execute(delete(Shard).where(Shard.submission_id == submission_id))
        session.execute(
            delete(RobustnessShard).where(RobustnessShard.submission_id == submission_id)
        )
        folder = storage.resolve(
            settings.artifacts_dir, storage.submission_records_dir(submission_id)
        )
        _remove_tree(folder)
    submission = get_submission(session, submission_id)
    submission.progress = 0.0 if fresh else submission.progress
    submission.shards_done = 0 if fresh else submission.shards_done
    session.commit()
    return True


def _remove_tree(folder: Path) -> None:
    if folder.exists():
        shutil.rmtree(folder)
