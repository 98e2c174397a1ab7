"""A submission's progress, throughput and ETA: one computation every view shows.

Work is counted in each stage's natural units, images and forward passes ("samples"), under the
stage's estimate (``models.stages.base.StageEstimate``): done = the recorded shards' images
(and their forward passes under the estimate) + the running shards' partial counts, which the
worker's lease writes to their dispatch rows every few seconds. The submission's fraction is
forward passes done over forward passes estimated, so a cheap stage does not count like an
expensive one. REST (``GET /api/v1/submissions/{id}`` and ``/progress``), the status page and
the stored ``submissions.progress`` (written by ``refresh``) all come from ``reports``.

Throughput is measured, never assumed: the running shards' counters over their elapsed time
(summed over shards running at once), else this submission's recorded shards (forward passes
over recorded seconds), else, for the ETA only, this fleet's recent shards of the stage
(``models.runs.estimates.fleet_rates``; scaled to the submission's own network by its FLOPs
per sample where they were counted, ``models.runs.estimates.for_network``). The ETA is the
remaining forward passes of each stage over
its rate, plus the queue ahead (issue 34 §1: "the ETA said 7 min" while the run waited 9 min 40 s
behind others): every active submission made before it still has work queued in front of its
shards (each stage's queue is first in, first out), so their remaining work, at their rates, over
the workers busy now, is added; when a stage with work left was never measured, it is None and
says why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from models.core.settings import Settings
from models.db.base import utcnow
from models.db.entities import ShardDispatch, StageShard, Submission
from models.db.states import ACTIVE_STATES, WAITING_STATES, SubmissionState
from models.runs import backlog
from models.runs.estimates import (
    Rate,
    WorkEstimate,
    estimate_work,
    fleet_rates,
    for_network,
    stage_estimates,
)
from models.stages import registry
from models.stages.base import StageEstimate, UnitCost
from models.stages.work import WorkItem, planning_item
from models.submissions.lifecycle import get_submission

S = SubmissionState
Key = tuple[str, str, int]


@dataclass(frozen=True)
class UnitProgress:
    """One unit of one stage (a certification test set, ...): shards, images, forward passes."""

    stage: str
    unit: str
    shards_done: int
    shards_running: int
    shards_total: int
    images_done: int
    images_total: int
    samples_done: int
    samples_total: int


@dataclass(frozen=True)
class StageProgress:
    """One stage summed over its units, with its measured throughput and ETA (None: not
    measured, or nothing left)."""

    stage: str
    title: str
    images_done: int
    images_total: int
    samples_done: int
    samples_total: int
    exact: bool
    throughput: Rate | None
    eta_seconds: float | None


@dataclass(frozen=True)
class ProgressReport:
    """Everything the views show about a submission's progress (see the module docstring)."""

    submission_id: int
    state: SubmissionState
    fraction: float
    images_done: int
    images_total: int
    samples_done: int
    samples_total: int
    units: tuple[UnitProgress, ...]
    stages: tuple[StageProgress, ...]
    throughput: Rate | None
    eta_seconds: float | None
    eta_basis: str
    estimate: WorkEstimate
    queue_ahead: backlog.QueueAhead | None = None
    """The work of the active submissions made before this one (None once it ended)."""


@dataclass
class _Tally:
    """Running sums while a stage's units are counted."""

    images: int = 0
    samples: int = 0
    recorded_samples: int = 0
    recorded_images: int = 0
    recorded_seconds: float = 0.0
    running: list[tuple[int, int, float]] = field(default_factory=list)
    """(images, samples, seconds) of each running shard that has reported."""

    def running_rate(self) -> Rate | None:
        if not self.running:
            return None
        return Rate(
            samples_per_second=sum(s / t for _, s, t in self.running),
            images_per_second=sum(i / t for i, _, t in self.running),
            basis=f"{len(self.running)} shard(s) running now",
        )

    def recorded_rate(self) -> Rate | None:
        if self.recorded_seconds <= 0:
            return None
        return Rate(
            samples_per_second=self.recorded_samples / self.recorded_seconds,
            images_per_second=self.recorded_images / self.recorded_seconds,
            basis="this submission's recorded shards",
        )


def reports(
    session: Session,
    submissions: Sequence[Submission],
    *,
    settings: Settings,
    rates: Mapping[str, Rate] | None = None,
    now: datetime | None = None,
    with_queue: bool = True,
) -> dict[int, ProgressReport]:
    """Reports of several submissions with one query per table (a listing). ``rates``: this
    fleet's per-stage throughput (measured here when None; pass ``{}`` when only the fractions
    are wanted); ``with_queue``: add the queue ahead of each active one to its ETA."""
    now = now or utcnow()
    plain = _plain_reports(session, submissions, settings=settings, rates=rates, now=now)
    active = [s for s in submissions if s.state in ACTIVE_STATES]
    if not with_queue or not active:
        return plain
    ahead = _queue_ahead(session, active, settings=settings, now=now)
    return {sid: _with_queue(report, ahead.get(sid)) for sid, report in plain.items()}


def _plain_reports(
    session: Session,
    submissions: Sequence[Submission],
    *,
    settings: Settings,
    rates: Mapping[str, Rate] | None,
    now: datetime,
) -> dict[int, ProgressReport]:
    """Each submission's own progress and ETA, without the queue ahead."""
    ids = [s.id for s in submissions]
    recorded: dict[int, list[StageShard]] = {i: [] for i in ids}
    running: dict[int, list[ShardDispatch]] = {i: [] for i in ids}
    if ids:
        for shard in session.scalars(select(StageShard).where(StageShard.submission_id.in_(ids))):
            recorded[shard.submission_id].append(shard)
        for row in session.scalars(
            select(ShardDispatch)
            .where(ShardDispatch.submission_id.in_(ids), ShardDispatch.claimed_by.is_not(None))
            .execution_options(populate_existing=True)  # written by other processes' UPDATEs
        ):
            running[row.submission_id].append(row)
    estimates = {s.id: stage_estimates(_item(s, settings), settings) for s in submissions}
    if rates is None:
        rates = fleet_rates(session, {e.stage for es in estimates.values() for e in es})
    return {
        s.id: _report(
            s,
            estimates[s.id],
            recorded[s.id],
            running[s.id],
            for_network(rates, s.flops_per_sample),
            settings,
            now,
        )
        for s in submissions
    }


def _queue_ahead(
    session: Session,
    active: Sequence[Submission],
    *,
    settings: Settings,
    now: datetime,
) -> dict[int, backlog.QueueAhead]:
    """For each active submission, the remaining work of the active ones made before it
    (``models.runs.backlog``), from their own reports."""
    last = max(s.id for s in active)
    earlier = list(
        session.scalars(
            select(Submission)
            .where(Submission.state.in_(ACTIVE_STATES), Submission.id < last)
            .order_by(Submission.id)
        )
    )
    plain = _plain_reports(session, earlier, settings=settings, rates=None, now=now)
    left = [
        backlog.remaining(
            report.submission_id,
            [(s.stage, s.samples_total - s.samples_done, s.throughput) for s in report.stages],
            report.estimate.rates,
        )
        for report in plain.values()
    ]
    workers = backlog.busy_workers(session, now) if earlier else 1
    return backlog.ahead_of([s.id for s in active], left, workers)


def _with_queue(report: ProgressReport, ahead: backlog.QueueAhead | None) -> ProgressReport:
    """The report with the queue ahead added to its ETA and said in its basis."""
    if ahead is None:
        return report
    eta, basis = report.eta_seconds, report.eta_basis
    if ahead.submissions:
        basis = f"{basis}; plus the queue ahead: {ahead.describe()}"
        if ahead.seconds is None:
            eta = None
        elif eta is not None:
            eta += ahead.seconds
    return replace(report, eta_seconds=eta, eta_basis=basis, queue_ahead=ahead)


def report(session: Session, submission_id: int, *, settings: Settings) -> ProgressReport:
    """The report of one submission. Raises NotFoundError."""
    submission = get_submission(session, submission_id)
    return reports(session, [submission], settings=settings)[submission_id]


def refresh(session: Session, submission_id: int, *, settings: Settings) -> float:
    """Store the submission's fraction done (while it runs) and return it."""
    submission = get_submission(session, submission_id)
    fraction = reports(session, [submission], settings=settings, rates={}, with_queue=False)[
        submission_id
    ].fraction
    session.execute(
        update(Submission)
        .where(Submission.id == submission_id, Submission.state == S.RUNNING)
        .values(progress=fraction)
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return fraction


def record_partial(
    session: Session,
    submission_id: int,
    key: Key,
    *,
    worker: str,
    images: int,
    samples: int,
    settings: Settings,
) -> None:
    """A running shard's counts so far (the lease calls this, throttled); then the fraction."""
    session.execute(
        update(ShardDispatch)
        .where(*ShardDispatch.held(submission_id, key, worker))
        .values(images_done=images, samples_done=samples, updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    session.commit()
    refresh(session, submission_id, settings=settings)


def unit_cost(session: Session, submission_id: int, stage: str, unit: str, *,
              settings: Settings) -> UnitCost:  # fmt: skip
    """The estimated cost of one unit of a submission (forward passes of any image range)."""
    submission = get_submission(session, submission_id)
    return registry.get(stage).estimate(_item(submission, settings), settings).unit(unit)


def _item(submission: Submission, settings: Settings) -> WorkItem:
    """What the submission runs, for planning (no seed or weights are read)."""
    return planning_item(
        submission.benchmark,
        sigma=submission.sigma,
        manifest=dict(submission.artifact.manifest),
        settings=settings,
    )


def _report(
    submission: Submission,
    estimates: Sequence[StageEstimate],
    recorded: Sequence[StageShard],
    dispatched: Sequence[ShardDispatch],
    rates: Mapping[str, Rate],
    settings: Settings,
    now: datetime,
) -> ProgressReport:
    done = {(r.stage, r.unit, r.shard_index): r for r in recorded}
    live = [
        d
        for d in dispatched
        if submission.state == S.RUNNING
        and d.claimed_until is not None
        and d.claimed_until >= now
        and (d.stage, d.unit, d.shard_index) not in done
    ]
    by_unit: dict[tuple[str, str], list[StageShard]] = {}
    for shard in recorded:
        by_unit.setdefault((shard.stage, shard.unit), []).append(shard)
    running: dict[tuple[str, str], list[ShardDispatch]] = {}
    for row in live:
        running.setdefault((row.stage, row.unit), []).append(row)
    units, stages, tallies = [], [], {}
    for estimate in estimates:
        tally = tallies[estimate.stage] = _Tally()
        size = registry.get(estimate.stage).shard_size(settings)
        for cost in estimate.units:
            mine = by_unit.get((estimate.stage, cost.unit), [])
            going = running.get((estimate.stage, cost.unit), [])
            unit = _unit(estimate.stage, cost, mine, going, -(-cost.images // size))
            units.append(unit)
            _count(tally, cost, mine, going, unit)
        stages.append((estimate, tally))
    stage_rows, eta, eta_basis = _eta(submission.state, stages, rates)
    samples_total = sum(e.forward_passes for e in estimates)
    samples_done = sum(t.samples for t in tallies.values())
    if submission.state == S.FINISHED:
        fraction = 1.0
    else:
        fraction = min(1.0, samples_done / samples_total) if samples_total else 0.0
    return ProgressReport(
        submission_id=submission.id,
        state=submission.state,
        fraction=fraction,
        images_done=sum(t.images for t in tallies.values()),
        images_total=sum(e.images for e in estimates),
        samples_done=samples_done,
        samples_total=samples_total,
        units=tuple(units),
        stages=tuple(stage_rows),
        throughput=_throughput(list(tallies.values())),
        eta_seconds=eta,
        eta_basis=eta_basis,
        estimate=estimate_work(estimates, rates, submission.flops_per_sample),
    )


def _unit(stage: str, cost: UnitCost, mine: Sequence[StageShard],
          going: Sequence[ShardDispatch], shards_total: int) -> UnitProgress:  # fmt: skip
    images = sum(r.stop - r.start for r in mine) + sum(d.images_done for d in going)
    samples = sum(cost.passes(r.start, r.stop) for r in mine) + sum(d.samples_done for d in going)
    return UnitProgress(
        stage=stage,
        unit=cost.unit,
        shards_done=len(mine),
        shards_running=len(going),
        shards_total=shards_total,
        images_done=min(images, cost.images),
        images_total=cost.images,
        samples_done=min(samples, cost.passes()),
        samples_total=cost.passes(),
    )


def _count(tally: _Tally, cost: UnitCost, mine: Sequence[StageShard],
           going: Sequence[ShardDispatch], unit: UnitProgress) -> None:  # fmt: skip
    tally.images += unit.images_done
    tally.samples += unit.samples_done
    for shard in mine:
        tally.recorded_images += shard.stop - shard.start
        tally.recorded_samples += cost.passes(shard.start, shard.stop)
        tally.recorded_seconds += shard.seconds
    for row in going:
        if row.started_at is None or row.updated_at is None or row.samples_done <= 0:
            continue
        seconds = (row.updated_at - row.started_at).total_seconds()
        if seconds > 0:
            tally.running.append((row.images_done, row.samples_done, seconds))


def _throughput(tallies: Sequence[_Tally]) -> Rate | None:
    """The submission's throughput: its running shards now, else its recorded shards."""
    now = [rate for t in tallies if (rate := t.running_rate()) is not None]
    if now:
        shards = sum(len(t.running) for t in tallies)
        return Rate(
            samples_per_second=sum(r.samples_per_second for r in now),
            images_per_second=sum(r.images_per_second for r in now),
            basis=f"{shards} shard(s) running now",
        )
    seconds = sum(t.recorded_seconds for t in tallies)
    if seconds <= 0:
        return None
    return Rate(
        samples_per_second=sum(t.recorded_samples for t in tallies) / seconds,
        images_per_second=sum(t.recorded_images for t in tallies) / seconds,
        basis="average over this submission's recorded shards",
    )


def _eta(
    state: SubmissionState,
    stages: Sequence[tuple[StageEstimate, _Tally]],
    fleet: Mapping[str, Rate],
) -> tuple[list[StageProgress], float | None, str]:
    """Per-stage rows, the ETA in seconds (None when not measurable) and its basis."""
    rows, parts, unmeasured, total = [], [], [], 0.0
    for estimate, tally in stages:
        own = tally.running_rate() or tally.recorded_rate()
        rate = own or fleet.get(estimate.stage)
        left = max(0, estimate.forward_passes - tally.samples)
        stage_eta: float | None = 0.0
        if left and rate is None:
            stage_eta = None
            unmeasured.append(estimate.stage)
        elif left and rate is not None:
            stage_eta = left / rate.samples_per_second
            total += stage_eta
            parts.append(
                f"{estimate.stage}: {left:,} forward passes left at "
                f"{rate.samples_per_second:,.0f} samples/s ({rate.basis})"
            )
        rows.append(
            StageProgress(
                stage=estimate.stage,
                title=registry.get(estimate.stage).title,
                images_done=tally.images,
                images_total=estimate.images,
                samples_done=tally.samples,
                samples_total=estimate.forward_passes,
                exact=estimate.exact,
                throughput=own,
                eta_seconds=stage_eta if state in ACTIVE_STATES else None,
            )
        )
    if state not in ACTIVE_STATES:
        return rows, None, f"no ETA: the submission is {state}"
    if unmeasured:
        return rows, None, (
            f"no ETA yet: no {', '.join(unmeasured)} shard has reported its throughput on "
            "this fleet; it appears once the first one does"
        )  # fmt: skip
    waiting = state in WAITING_STATES
    basis = "; ".join(parts) or "nothing left to compute"
    if waiting:
        basis += " (from when a worker starts it)"
    return rows, total, basis
