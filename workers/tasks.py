"""The pipeline's Celery tasks: validate → certify and robustness shards → aggregate → finished.

Messages carry ids only (JSON); each task re-reads the submission and returns quietly when the
state says its work is done or no longer wanted, so a redelivered or duplicated message is
harmless. Shards are recorded once per (submission, test set, shard index) by a unique key after
their parquet file is written atomically; robustness shards (seed 004's attacks on the clean
subset, when the benchmark has that stage) likewise per (submission, shard index), on their own
queue. The last shard of either kind to finish enqueues ``aggregate``.
Nothing ever blocks on another task's result.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from celery import Task
from celery.exceptions import SoftTimeLimitExceeded
from kombu.exceptions import OperationalError as BrokerError
from sqlalchemy.exc import OperationalError as DatabaseError
from sqlalchemy.orm import Session

from certbench.errors import DataSourceError, ThreatModelError
from certbench.records import write_records
from models import pipeline, results, storage
from models.db import session_scope
from models.entities import Submission
from models.settings import Settings, get_settings
from models.states import Reason, SubmissionState
from workers import certification, robustness, watchdog
from workers.app import app
from workers.config import WorkerSettings
from workers.errors import ShardCancelled, WorkerError
from workers.lease import ShardLease
from workers.names import (
    AGGREGATE,
    CERTIFY_SHARD,
    CONTROL_QUEUE,
    QUEUE,
    ROBUSTNESS_QUEUE,
    ROBUSTNESS_SHARD,
    VALIDATE,
    WATCHDOG,
)
from workers.validation import validate_model

S = SubmissionState
T = TypeVar("T")

TRANSIENT = (DatabaseError, BrokerError)
"""Database or broker hiccups: retried with backoff; everything else fails the submission."""

RETRY = {"autoretry_for": TRANSIENT, "retry_backoff": True, "retry_jitter": True, "max_retries": 5}


class PipelineTask(Task):
    """Base task: late acks, re-run on worker loss, and a failed submission on a crash.

    If the pool process dies under a task (OOM killer, segfault, kill -9), the parent re-sends
    it after ``default_retry_delay`` s, at most ``max_retries`` times (``retry_on_worker_lost``),
    so a shard that always kills its process cannot loop forever; past that the message is
    acknowledged and the watchdog fails the run when its lease expires. If the whole worker dies,
    the unacknowledged message comes back from Redis after the visibility timeout.
    """

    acks_late = True
    reject_on_worker_lost = True
    retry_on_worker_lost = True
    default_retry_delay = 5
    typing = True

    def on_failure(
        self,
        exc: BaseException,
        task_id: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        einfo: Any,
    ) -> None:
        """An unexpected error ends the run as ``failed`` instead of leaving it hanging."""
        if not args:
            return
        submission_id = int(args[0])
        message = f"{self.name} crashed on worker {worker_name()}: {type(exc).__name__}: {exc}"
        with session_scope(get_settings()) as session:
            pipeline.fail(session, submission_id, reason=Reason.WORKER_ERROR.value, message=message)


def worker_name() -> str:
    """Who holds a lease: the Celery node name of the running task plus the pool process id."""
    task = app.current_worker_task
    node = getattr(task.request, "hostname", None) if task is not None else None
    return f"{node or os.uname().nodename}/{os.getpid()}"


# ------------------------------------------------------------------------------------ validate


@app.task(name=VALIDATE, base=PipelineTask, bind=True, **RETRY)
def validate(self: PipelineTask, submission_id: int) -> str:
    """Safe-load the upload and forward a dummy batch; then queue its shards or reject it."""
    settings = get_settings()
    with session_scope(settings) as session:
        state = pipeline.get_state(session, submission_id)
        if state in (S.QUEUED, S.RUNNING):
            # Redelivered after the state moved on: the crash may have cut dispatch short.
            return dispatch(session, submission_id, settings)
        if state == S.SUBMITTED:
            started = pipeline.transition(
                session,
                submission_id,
                from_states={S.SUBMITTED},
                to_state=S.VALIDATING,
                worker=worker_name(),
                settings=settings,
            )
            if not started:
                return f"skipped: submission {submission_id} left 'submitted' meanwhile"
        elif state != S.VALIDATING:
            return f"skipped: submission {submission_id} is {state}"
        item = pipeline.get_work_item(session, submission_id, settings=settings)
        if item.weights_path is None or not item.weights_path.is_file():
            pipeline.fail(
                session,
                submission_id,
                reason=Reason.ARTIFACT_MISSING.value,
                message=f"the stored weights of submission {submission_id} are gone "
                f"({item.weights_path}); the submitter has to upload them again",
            )
            return "failed: artifact missing"
    device = certification.resolve_device(settings.worker_device)
    try:
        rejection = validate_model(item, device=device)
    except SoftTimeLimitExceeded:
        return _fail(settings, submission_id, Reason.TIME_LIMIT, "validation ran out of time")
    with session_scope(settings) as session:
        if rejection is not None:
            pipeline.reject(
                session,
                submission_id,
                reason=rejection.reason.value,
                message=rejection.message,
                settings=settings,
            )
            return f"rejected: {rejection.reason}"
        queued = pipeline.transition(
            session,
            submission_id,
            from_states={S.VALIDATING},
            to_state=S.QUEUED,
            reason=Reason.VALIDATED.value,
            message=f"model validated on {device}",
        )
        if not queued:
            return f"skipped: submission {submission_id} left 'validating' meanwhile"
        return dispatch(session, submission_id, settings)


def dispatch(session: Session, submission_id: int, settings: Settings) -> str:
    """Enqueue every shard not yet recorded; with none left, go straight to aggregate."""
    missing = pipeline.missing_shards(session, submission_id, settings=settings)
    for shard in missing:
        app.send_task(
            CERTIFY_SHARD, args=[submission_id, shard.test_set_id, shard.shard_index], queue=QUEUE
        )
    attacks = pipeline.missing_robustness_shards(session, submission_id, settings=settings)
    for shard in attacks:
        app.send_task(
            ROBUSTNESS_SHARD, args=[submission_id, shard.shard_index], queue=ROBUSTNESS_QUEUE
        )
    missing = missing + attacks
    if not missing:
        pipeline.transition(
            session,
            submission_id,
            from_states={S.QUEUED},
            to_state=S.RUNNING,
            reason=Reason.STARTED.value,
            message="all shards already recorded (resumed run)",
            worker=worker_name(),
            settings=settings,
        )
        app.send_task(AGGREGATE, args=[submission_id], queue=CONTROL_QUEUE)
        return "aggregate enqueued"
    return f"{len(missing)} shard(s) enqueued"


# ------------------------------------------------------------------------------- certify shard


@app.task(name=CERTIFY_SHARD, base=PipelineTask, bind=True, **RETRY)
def certify_shard(
    self: PipelineTask, submission_id: int, test_set_id: int, shard_index: int
) -> str:
    """CERTIFY one image range of one test set; record it once; maybe enqueue aggregate."""
    settings, knobs = get_settings(), WorkerSettings()
    worker = worker_name()
    with session_scope(settings) as session:
        if not _start_running(session, submission_id, settings, worker):
            state = pipeline.get_state(session, submission_id)
            return f"skipped: submission {submission_id} is {state}"
        recorded = {
            (s.test_set_id, s.shard_index) for s in pipeline.finished_shards(session, submission_id)
        }
        if (test_set_id, shard_index) in recorded:
            _maybe_aggregate(session, submission_id)
            return "already recorded"
        shard = _find_shard(session, submission_id, test_set_id, shard_index, settings)
        item = pipeline.get_work_item(session, submission_id, settings=settings)
        test_set = next(ts for ts in item.test_sets if ts.id == test_set_id)
        pipeline.heartbeat(session, submission_id, settings=settings, worker=worker)
    started = time.perf_counter()
    records = _run_leased(
        settings,
        item,
        shard,
        worker=worker,
        label=f"shard {shard_index} of test set {test_set.name!r}",
        run=lambda lease: certification.certify_shard(
            item,
            test_set,
            shard,
            device=certification.resolve_device(settings.worker_device),
            batch_size=knobs.certify_batch_size,
            on_record=lease.on_record,
        ),
    )
    if isinstance(records, str):
        return records
    relpath = storage.shard_records_relpath(submission_id, test_set.name, shard_index)
    target = storage.resolve(settings.artifacts_dir, relpath)
    remove_stale_partials(target, older_than=settings.shard_time_limit_seconds)
    write_records(records, target, metadata=certification.records_metadata(item, test_set, shard))
    with session_scope(settings) as session:
        new = pipeline.record_shard(
            session,
            submission_id=submission_id,
            test_set_id=test_set_id,
            shard_index=shard_index,
            start=shard.start,
            stop=shard.stop,
            count=len(records),
            seconds=time.perf_counter() - started,
            records_path=relpath,
            worker=worker,
            settings=settings,
        )
        _maybe_aggregate(session, submission_id)
    return f"{'recorded' if new else 'already recorded'}: {len(records)} image(s)"


def remove_stale_partials(target: Path, *, older_than: float) -> list[Path]:
    """Delete temporary files a killed attempt of this shard left next to ``target``.

    Only files older than the hard time limit go: no live attempt can be writing them, so a
    duplicate delivery running at the same time never loses its own temporary file.
    """
    cutoff = time.time() - older_than
    stale = []
    for path in target.parent.glob(f".{target.name}.*.tmp"):
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
                stale.append(path)
        except FileNotFoundError:
            continue  # its writer renamed it into place, or another sweep removed it
    return stale


def _run_leased(
    settings: Settings,
    item: pipeline.WorkItem,
    shard: pipeline.ShardSpec,
    *,
    worker: str,
    label: str,
    run: Callable[[ShardLease], T],
    size_setting: str = "CERTBENCH_SHARD_SIZE",
) -> T | str:
    """Run a shard's work under a lease; a stop, a time limit or missing data/weights/anchors
    becomes the task's outcome string (the submission failed with the matching reason)."""
    submission_id = item.submission_id
    if item.weights_path is None or not item.weights_path.is_file():
        return _fail(
            settings,
            submission_id,
            Reason.ARTIFACT_MISSING,
            f"weights of submission {submission_id} are gone",
        )
    lease = ShardLease(
        settings,
        submission_id,
        worker=worker,
        shard_images=shard.stop - shard.start,
        cancel_check_seconds=WorkerSettings().cancel_check_seconds,
    )
    try:
        with lease:
            return run(lease)
    except ShardCancelled as stop:
        return f"stopped: {stop}"
    except SoftTimeLimitExceeded:
        return _fail(
            settings,
            submission_id,
            Reason.TIME_LIMIT,
            f"{label} ({shard.stop - shard.start} images) exceeded the soft time limit of "
            f"{settings.shard_soft_time_limit_seconds} s; lower {size_setting} or raise "
            "CERTBENCH_SHARD_SOFT_TIME_LIMIT_SECONDS, then re-run",
        )
    except DataSourceError as err:
        return _fail(settings, submission_id, Reason.DATASET_UNAVAILABLE, str(err))
    except ThreatModelError as err:
        return _fail(settings, submission_id, Reason.ANCHORS_UNAVAILABLE, str(err))


def _start_running(session: Session, submission_id: int, settings: Settings, worker: str) -> bool:
    """queued → running on the first shard; True iff the submission is running now."""
    if pipeline.get_state(session, submission_id) == S.QUEUED:
        pipeline.transition(
            session,
            submission_id,
            from_states={S.QUEUED},
            to_state=S.RUNNING,
            reason=Reason.STARTED.value,
            message=f"certifying on {worker}",
            worker=worker,
            settings=settings,
        )
    return pipeline.get_state(session, submission_id) == S.RUNNING


def _find_shard(
    session: Session, submission_id: int, test_set_id: int, shard_index: int, settings: Settings
) -> pipeline.ShardSpec:
    for spec in pipeline.plan_shards(session, submission_id, settings=settings):
        if spec.test_set_id == test_set_id and spec.shard_index == shard_index:
            return spec
    raise WorkerError(
        f"submission {submission_id} has no shard {shard_index} of test set {test_set_id} with "
        f"CERTBENCH_SHARD_SIZE={settings.shard_size}; every worker must use the same shard size"
    )


def _maybe_aggregate(session: Session, submission_id: int) -> None:
    """Enqueue aggregate once every planned shard is recorded (duplicates are harmless)."""
    submission = session.get(Submission, submission_id)
    if submission is None or submission.state != S.RUNNING:
        return
    if pipeline.all_shards_recorded(session, submission_id):
        app.send_task(AGGREGATE, args=[submission_id], queue=CONTROL_QUEUE)


def _fail(settings: Settings, submission_id: int, reason: Reason, message: str) -> str:
    with session_scope(settings) as session:
        pipeline.fail(session, submission_id, reason=reason.value, message=message)
    return f"failed: {reason}"


# ---------------------------------------------------------------------------- robustness shard


@app.task(name=ROBUSTNESS_SHARD, base=PipelineTask, bind=True, **RETRY)
def robustness_shard(self: PipelineTask, submission_id: int, shard_index: int) -> str:
    """Attack one image range of the clean subset (seed 004); record it once; maybe aggregate."""
    settings, knobs = get_settings(), WorkerSettings()
    worker = worker_name()
    with session_scope(settings) as session:
        if not _start_running(session, submission_id, settings, worker):
            state = pipeline.get_state(session, submission_id)
            return f"skipped: submission {submission_id} is {state}"
        done = pipeline.finished_robustness_shards(session, submission_id)
        if shard_index in {s.shard_index for s in done}:
            _maybe_aggregate(session, submission_id)
            return "already recorded"
        plan = pipeline.plan_robustness_shards(session, submission_id, settings=settings)
        shard = next((s for s in plan if s.shard_index == shard_index), None)
        item = pipeline.get_work_item(session, submission_id, settings=settings)
        pipeline.heartbeat(session, submission_id, settings=settings, worker=worker)
    if shard is None:
        raise WorkerError(
            f"submission {submission_id} has no robustness shard {shard_index} with "
            f"CERTBENCH_ROBUSTNESS_SHARD_SIZE={settings.robustness_shard_size} "
            f"(CERTBENCH_SHARD_SIZE={settings.shard_size}); every worker must use the same sizes"
        )
    started = time.perf_counter()
    outcome = _run_leased(
        settings,
        item,
        shard,
        worker=worker,
        label=f"robustness shard {shard_index}",
        size_setting="CERTBENCH_ROBUSTNESS_SHARD_SIZE",
        run=lambda lease: robustness.robustness_shard(
            item,
            shard,
            device=certification.resolve_device(settings.worker_device),
            batch_size=knobs.robustness_batch_size,
            on_batch=lease.on_progress,
        ),
    )
    if isinstance(outcome, str):
        return outcome
    report, metadata = outcome
    relpath = storage.robustness_shard_relpath(submission_id, shard_index)
    target = storage.resolve(settings.artifacts_dir, relpath)
    remove_stale_partials(target, older_than=settings.shard_time_limit_seconds)
    report.write(target, metadata=metadata)
    count = len({r.index for r in report.records})
    with session_scope(settings) as session:
        new = pipeline.record_robustness_shard(
            session,
            submission_id=submission_id,
            shard_index=shard_index,
            start=shard.start,
            stop=shard.stop,
            count=count,
            seconds=time.perf_counter() - started,
            records_path=relpath,
            worker=worker,
            settings=settings,
        )
        _maybe_aggregate(session, submission_id)
    return f"{'recorded' if new else 'already recorded'}: {count} image(s) attacked"


# ----------------------------------------------------------------------------------- aggregate


@app.task(name=AGGREGATE, base=PipelineTask, bind=True, **RETRY)
def aggregate(self: PipelineTask, submission_id: int) -> str:
    """Merge shard records per test set, store metrics and the leaderboard entry, finish."""
    settings = get_settings()
    with session_scope(settings) as session:
        state = pipeline.get_state(session, submission_id)
        if state != S.RUNNING:
            return f"skipped: submission {submission_id} is {state}"
        if pipeline.missing_shards(
            session, submission_id, settings=settings
        ) or pipeline.missing_robustness_shards(session, submission_id, settings=settings):
            return dispatch(session, submission_id, settings)
        finished = results.complete_submission(session, submission_id, settings=settings)
    return "finished" if finished else "skipped: no longer running"


# ------------------------------------------------------------------------------------ watchdog


@app.task(name=WATCHDOG, bind=True, ignore_result=True)
def watchdog_task(self: Task) -> list[int]:
    """One watchdog sweep (for ``celery beat``); every worker also sweeps from a thread."""
    return watchdog.sweep(get_settings())
