"""The pipeline's Celery tasks: validate → shards of every stage → aggregate → finished.

Messages carry ids only (JSON); each task re-reads the submission and returns quietly when the
state says its work is done or no longer wanted, so a redelivered or duplicated message is
harmless. A task that has work reads the submission's ``WorkItem`` once
(``models.stages.work.get_work_item``) and passes it to everything it calls. One task,
``run_shard``, runs a shard of any stage (``models.stages``) under a lease and records it once
per (submission, stage, unit, shard index) by a unique key after its records file is written
atomically. The last shard to finish enqueues ``aggregate``, which runs every stage's merge.
Nothing here knows a stage by name; nothing ever blocks on another task's result.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from celery import Task
from celery.exceptions import SoftTimeLimitExceeded
from kombu.exceptions import OperationalError as BrokerError
from sqlalchemy.exc import OperationalError as DatabaseError
from sqlalchemy.orm import Session

from models.benchmarks.generated import ensure_for_work_item
from models.core.settings import Settings, get_settings
from models.db.base import utcnow
from models.db.engine import session_scope
from models.db.entities import Submission
from models.db.states import Reason, SubmissionState
from models.runs import results, shards
from models.stages import registry
from models.stages.base import RunContext, ShardOutput, ShardSpec, Stage
from models.stages.work import WorkItem, get_work_item
from models.submissions import lifecycle as pipeline
from models.submissions import storage
from workers import watchdog
from workers.app import app
from workers.config import WorkerSettings, batch_size_for
from workers.device import resolve_device
from workers.errors import ShardCancelled, WorkerError
from workers.lease import ShardLease
from workers.names import AGGREGATE, CONTROL_QUEUE, RUN_SHARD, VALIDATE, WATCHDOG
from workers.validation import validate_model

S = SubmissionState
T = TypeVar("T")
log = logging.getLogger(__name__)

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
        elif state not in (S.VALIDATING, S.QUEUED, S.RUNNING):
            return f"skipped: submission {submission_id} is {state}"
        item = get_work_item(session, submission_id, settings=settings)
        if state in (S.QUEUED, S.RUNNING):
            # Redelivered after the state moved on: the crash may have cut dispatch short.
            return dispatch(session, item, settings)
        if item.weights_path is None or not item.weights_path.is_file():
            pipeline.fail(
                session,
                submission_id,
                reason=Reason.ARTIFACT_MISSING.value,
                message=f"the stored weights of submission {submission_id} are gone "
                f"({item.weights_path}); the submitter has to upload them again",
            )
            return "failed: artifact missing"
    device = resolve_device(settings.worker_device)
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
        return dispatch(session, item, settings)


def plan(session: Session, item: WorkItem, settings: Settings) -> list[ShardSpec]:
    """Every shard of the submission, planned from its work item (``shards.plan_item``), and
    its ``shards_total`` kept current (``shards.all_recorded`` counts against it)."""
    full = shards.plan_item(item, settings)
    pipeline.set_shards_total(session, item.submission_id, len(full))
    return full


def missing_shards(session: Session, item: WorkItem, settings: Settings) -> list[ShardSpec]:
    """The planned shards not yet recorded (what a resumed submission still has to run)."""
    done = {(s.stage, s.unit, s.shard_index) for s in shards.recorded(session, item.submission_id)}
    return [spec for spec in plan(session, item, settings) if spec.key not in done]


def dispatch(session: Session, item: WorkItem, settings: Settings) -> str:
    """Enqueue every shard not yet recorded, each on its stage's queue; with none left, go
    straight to aggregate."""
    missing = missing_shards(session, item, settings)
    if missing:
        return send_shards(session, item.submission_id, missing)
    submission_id = item.submission_id
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


def send_shards(session: Session, submission_id: int, missing: list[ShardSpec]) -> str:
    """Note the shards as dispatched, then send each to its stage's queue (ids only)."""
    shards.mark_dispatched(session, submission_id, missing)
    for spec in missing:
        app.send_task(
            RUN_SHARD,
            args=[submission_id, spec.stage, spec.unit, spec.shard_index],
            queue=registry.get(spec.stage).queue,
        )
    return f"{len(missing)} shard(s) enqueued"


# ------------------------------------------------------------------------------------- shards


@app.task(name=RUN_SHARD, base=PipelineTask, bind=True, **RETRY)
def run_shard(
    self: PipelineTask, submission_id: int, stage_name: str, unit: str, shard_index: int
) -> str:
    """Run one shard of one stage; record it once; maybe enqueue aggregate."""
    settings = get_settings()
    worker = worker_name()
    stage = registry.get(stage_name)
    key = (stage_name, unit, shard_index)
    with session_scope(settings) as session:
        if not _start_running(session, submission_id, settings, worker):
            state = pipeline.get_state(session, submission_id)
            return f"skipped: submission {submission_id} is {state}"
        if key in {
            (r.stage, r.unit, r.shard_index) for r in shards.recorded(session, submission_id)
        }:
            _maybe_aggregate(session, submission_id)
            return "already recorded"
        item = get_work_item(session, submission_id, settings=settings)
        spec = next((s for s in plan(session, item, settings) if s.key == key), None)
        if spec is None:
            raise WorkerError(
                f"submission {submission_id} has no shard {shard_index} of {stage_name} unit "
                f"{unit!r} with this worker's shard sizes ({stage.shard_size_setting}="
                f"{stage.shard_size(settings)}); every worker must use the same shard sizes"
            )
        holder = shards.claim(session, submission_id, spec, worker=worker, settings=settings)
        if holder is not None:
            return f"skipped: {stage_name} shard {shard_index} is running on {holder}"
        pipeline.heartbeat(session, submission_id, settings=settings, worker=worker)
    relpath = shards.records_relpath(submission_id, spec)
    target = storage.resolve(settings.artifacts_dir, relpath)
    remove_stale_partials(target, older_than=settings.shard_time_limit_seconds)
    attempt = attempt_path(target)
    started = time.perf_counter()
    label = f"{stage_name} shard {shard_index}" + (f" of {unit!r}" if unit else "")
    output = _run_leased(
        settings,
        item,
        spec,
        worker=worker,
        label=label,
        size_setting=stage.shard_size_setting,
        run=lambda lease: _run_stage(stage, item, spec, attempt, lease, settings),
    )
    if isinstance(output, str):
        attempt.unlink(missing_ok=True)
        _release(settings, submission_id, key, worker)
        return output
    with session_scope(settings) as session:
        try:
            new = shards.record(
                session,
                submission_id=submission_id,
                spec=spec,
                count=output.count,
                seconds=time.perf_counter() - started,
                records_path=relpath,
                worker=worker,
                settings=settings,
                attempt=attempt,
            )
        except shards.ClaimLostError as lost:
            return _fenced(session, item, spec, label=label, worker=worker, lost=lost)
        shards.release_claim(session, submission_id, key, worker=worker)
        _maybe_aggregate(session, submission_id)
    return f"{'recorded' if new else 'already recorded'}: {output.count} {output.noun}"


def attempt_path(target: Path) -> Path:
    """Where this attempt writes a shard's records before they are recorded (then moved to
    ``target`` under the claim: ``shards.record``). Its own name per attempt, so a worker whose
    claim lapsed never writes the file another worker's recorded shard points at; the writer's
    temporary file (``.<name>.*.tmp``) and a killed attempt's file are swept by
    ``remove_stale_partials``."""
    return target.with_name(f"{target.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.attempt")


def _fenced(session: Session, item: WorkItem, spec: ShardSpec, *, label: str, worker: str,
            lost: shards.ClaimLostError) -> str:  # fmt: skip
    """The shard finished after this worker's claim lapsed: its result was not stored (the
    shard is another worker's now, or the reconciler's to send again); noted in its history."""
    log.warning("fenced on %s: %s", worker, lost)
    entry = {"worker": worker, "at": utcnow().isoformat(), "outcome": "fenced",
             "images_done": spec.size, "message": str(lost)}  # fmt: skip
    shards.note_attempt(session, item.submission_id, spec.key, entry)
    return f"fenced: {label} of submission {item.submission_id}: {lost}"


def _run_stage(
    stage: Stage,
    item: WorkItem,
    spec: ShardSpec,
    target: Path,
    lease: ShardLease,
    settings: Settings,
) -> ShardOutput:
    """Write any generated data set the shard reads that this machine lacks, then run it."""
    ensure_for_work_item(item, settings)
    return stage.run(
        item,
        spec,
        RunContext(
            target=target,
            device=resolve_device(settings.worker_device),
            batch_size=batch_size_for(stage),
            on_progress=lease.on_progress,
            settings=settings,
        ),
    )


def _release(settings: Settings, submission_id: int, key: tuple[str, str, int], worker: str
             ) -> None:  # fmt: skip
    with session_scope(settings) as session:
        shards.release_claim(session, submission_id, key, worker=worker)


def remove_stale_partials(target: Path, *, older_than: float) -> list[Path]:
    """Delete temporary and attempt files a killed attempt of this shard left next to
    ``target``.

    Only files older than the hard time limit go: no live attempt can be writing them, so a
    duplicate delivery running at the same time never loses its own temporary file.
    """
    cutoff = time.time() - older_than
    stale = []
    pattern = (f".{target.name}.*.tmp", f"{target.name}.*.attempt")
    for path in [p for glob in pattern for p in target.parent.glob(glob)]:
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
                stale.append(path)
        except FileNotFoundError:
            continue  # its writer renamed it into place, or another sweep removed it
    return stale


def _run_leased(
    settings: Settings,
    item: WorkItem,
    shard: ShardSpec,
    *,
    worker: str,
    label: str,
    run: Callable[[ShardLease], T],
    size_setting: str,
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
    cost = registry.get(shard.stage).estimate(item, settings).unit(shard.unit)
    lease = ShardLease(
        settings,
        submission_id,
        worker=worker,
        shard_images=shard.size,
        cancel_check_seconds=WorkerSettings().cancel_check_seconds,
        shard_key=shard.key,
        samples=lambda done: cost.passes(shard.start, shard.start + done),
    )
    try:
        with lease:
            return run(lease)
    except ShardCancelled as stop:
        return _stopped(settings, item, shard, label=label, worker=worker, done=lease.done,
                        stop=stop)  # fmt: skip
    except Exception as err:
        if _soft_time_limit(err):
            return _fail(
                settings,
                submission_id,
                Reason.TIME_LIMIT,
                f"{label} ({shard.size} images) exceeded the soft time limit of "
                f"{settings.shard_soft_time_limit_seconds} s; lower {size_setting} or raise "
                "CERTBENCH_SHARD_SOFT_TIME_LIMIT_SECONDS, then re-run",
            )
        reason = registry.get(shard.stage).failure_reason(err)
        if reason is None:
            raise
        return _fail(settings, submission_id, Reason(reason), str(err))


def _soft_time_limit(err: BaseException) -> bool:
    """Whether `err` is Celery's SoftTimeLimitExceeded or wraps it: the signal can land inside
    torch.compile (a long run compiles its model on its first shard), and Dynamo/Inductor
    re-raise it as InternalTorchDynamoError, BackendCompilerFailed or InductorError with the
    original as ``__context__`` (or ``inner_exception``)."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [err]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        if isinstance(current, SoftTimeLimitExceeded):
            return True
        seen.add(id(current))
        pending += [
            current.__cause__,
            current.__context__,
            getattr(current, "inner_exception", None),
        ]
    return False


def _stopped(
    settings: Settings,
    item: WorkItem,
    shard: ShardSpec,
    *,
    label: str,
    worker: str,
    done: int,
    stop: ShardCancelled,
) -> str:
    """Log and record why a shard stopped before it finished (cancelled, failed by the
    watchdog, finished elsewhere, ...); the outcome string starts with that word."""
    sentence = (
        f"{label} of submission {item.submission_id} stopped after {done} of {shard.size} "
        f"image(s): {stop}"
    )
    log.info("%s on %s: %s", stop.outcome, worker, sentence)
    entry = {"worker": worker, "at": utcnow().isoformat(), "outcome": stop.outcome,
             "images_done": done, "message": str(stop)}  # fmt: skip
    with session_scope(settings) as session:
        shards.note_attempt(session, item.submission_id, shard.key, entry)
    return f"{stop.outcome}: {sentence}"


def _start_running(session: Session, submission_id: int, settings: Settings, worker: str) -> bool:
    """queued → running on the first shard; True iff the submission is running now."""
    if pipeline.get_state(session, submission_id) == S.QUEUED:
        pipeline.transition(
            session,
            submission_id,
            from_states={S.QUEUED},
            to_state=S.RUNNING,
            reason=Reason.STARTED.value,
            message=f"evaluating on {worker}",
            worker=worker,
            settings=settings,
        )
    return pipeline.get_state(session, submission_id) == S.RUNNING


def _maybe_aggregate(session: Session, submission_id: int) -> None:
    """Enqueue aggregate once every planned shard is recorded (duplicates are harmless)."""
    submission = session.get(Submission, submission_id)
    if submission is None or submission.state != S.RUNNING:
        return
    if shards.all_recorded(session, submission_id):
        app.send_task(AGGREGATE, args=[submission_id], queue=CONTROL_QUEUE)


def _fail(settings: Settings, submission_id: int, reason: Reason, message: str) -> str:
    with session_scope(settings) as session:
        pipeline.fail(session, submission_id, reason=reason.value, message=message)
    return f"failed: {reason}"


# ----------------------------------------------------------------------------------- aggregate


@app.task(name=AGGREGATE, base=PipelineTask, bind=True, **RETRY)
def aggregate(self: PipelineTask, submission_id: int) -> str:
    """Run every stage's merge, store results, metrics and the leaderboard entry, finish."""
    settings = get_settings()
    with session_scope(settings) as session:
        state = pipeline.get_state(session, submission_id)
        if state != S.RUNNING:
            return f"skipped: submission {submission_id} is {state}"
        item = get_work_item(session, submission_id, settings=settings)
        missing = missing_shards(session, item, settings)
        if missing:
            return send_shards(session, submission_id, missing)
        finished = results.complete_submission(
            session, submission_id, settings=settings, item=item
        )
    return "finished" if finished else "skipped: no longer running"


# ------------------------------------------------------------------------------------ watchdog


@app.task(name=WATCHDOG, bind=True, ignore_result=True)
def watchdog_task(self: Task) -> list[int]:
    """One watchdog sweep (reconciliation, for ``celery beat``); every worker also sweeps from a
    thread."""
    return watchdog.sweep(get_settings(), app)
