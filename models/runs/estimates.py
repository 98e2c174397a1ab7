"""How much work a submission is, and how fast this fleet does such work.

The work is each enabled stage's ``estimate`` (``models.stages.base.StageEstimate``): forward
passes per unit, from the benchmark's protocol alone, so it is known at intake (the 202
response, the daily compute quota in ``models.submissions.compute_quota``) and weights progress
(``models.runs.progress``). The time is that work divided by this fleet's measured throughput per
stage: the samples/s of the stage's most recently recorded shards (their final counts on the
dispatch rows, over their recorded seconds), never a figure assumed in advance; a stage that has
never run here has no rate, and the estimate says so instead of guessing. Where the shards'
networks had their FLOPs per sample counted at intake (``certbench.nets.cost``), the rate is
also a FLOP rate, and a submission's own estimate divides it by its network's FLOPs per sample
(:func:`for_network`): the figure its entry's cost per certified image is given in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from models.core.settings import Settings
from models.db.entities import Benchmark, ShardDispatch, StageShard, Submission
from models.stages import registry
from models.stages.base import StageEstimate
from models.stages.work import WorkItem, planning_item

#: Recorded shards per stage the fleet's throughput is measured over (the most recent ones).
RECENT_SHARDS = 20


@dataclass(frozen=True)
class Rate:
    """Measured throughput: forward passes (samples) and images per second, and on what;
    ``flops_per_second``: the FLOPs those samples took per second, over the shards whose
    submission's FLOPs per sample were counted at intake (None when none were)."""

    samples_per_second: float
    images_per_second: float
    basis: str
    flops_per_second: float | None = None


@dataclass(frozen=True)
class WorkEstimate:
    """A submission's estimated work: forward passes (every stage), the time they take at this
    fleet's measured throughput (None when a stage was never measured here) and how both were
    arrived at."""

    forward_passes: int
    seconds: float | None
    exact: bool
    basis: str
    stages: tuple[StageEstimate, ...]
    rates: Mapping[str, Rate]
    flops: int | None = None
    """``forward_passes`` × the network's FLOPs per sample where those were counted: what the
    daily compute quota charges (``models.submissions.compute_quota``)."""


def stage_estimates(item: WorkItem, settings: Settings) -> tuple[StageEstimate, ...]:
    """Every enabled stage's estimate, in pipeline order."""
    return tuple(stage.estimate(item, settings) for stage in registry.enabled_stages(item))


def fleet_rates(session: Session, stages: Iterable[str]) -> dict[str, Rate]:
    """Per stage, the throughput of its ``RECENT_SHARDS`` most recently recorded shards on this
    fleet (any submission: models differ, so this is a fleet-wide figure); stages never measured
    here are absent."""
    rates = {}
    for stage in dict.fromkeys(stages):
        rows = session.execute(
            select(
                ShardDispatch.samples_done,
                StageShard.count.label("images"),
                StageShard.seconds,
                Submission.flops_per_sample,
            )
            .join(
                StageShard,
                (StageShard.submission_id == ShardDispatch.submission_id)
                & (StageShard.stage == ShardDispatch.stage)
                & (StageShard.unit == ShardDispatch.unit)
                & (StageShard.shard_index == ShardDispatch.shard_index),
            )
            .join(Submission, Submission.id == ShardDispatch.submission_id)
            .where(
                ShardDispatch.stage == stage,
                ShardDispatch.samples_done > 0,
                StageShard.seconds > 0,
            )
            .order_by(StageShard.id.desc())
            .limit(RECENT_SHARDS)
        ).all()
        seconds = sum(row.seconds for row in rows)
        if rows and seconds > 0:
            counted = [row for row in rows if row.flops_per_sample]
            counted_seconds = sum(row.seconds for row in counted)
            flops = sum(row.samples_done * row.flops_per_sample for row in counted)
            rates[stage] = Rate(
                samples_per_second=sum(row.samples_done for row in rows) / seconds,
                images_per_second=sum(row.images for row in rows) / seconds,
                basis=f"this fleet's last {len(rows)} recorded {stage} shard(s)",
                flops_per_second=flops / counted_seconds if counted_seconds > 0 else None,
            )
    return rates


def for_network(rates: Mapping[str, Rate], flops_per_sample: int | None) -> dict[str, Rate]:
    """This fleet's rates for a network of ``flops_per_sample``: each stage's measured FLOP
    rate over the network's FLOPs per sample (a network ten times heavier than those measured
    runs ten times fewer samples per second), where both are known; the rates as measured
    otherwise (a submission from before FLOPs were counted, a stage no counted shard ran)."""
    if not flops_per_sample:
        return dict(rates)
    scaled = {}
    for stage, rate in rates.items():
        if rate.flops_per_second is None:
            scaled[stage] = rate
            continue
        samples = rate.flops_per_second / flops_per_sample
        scaled[stage] = Rate(
            samples_per_second=samples,
            images_per_second=rate.images_per_second * samples / rate.samples_per_second,
            basis=f"{rate.basis} at {rate.flops_per_second / 1e9:,.3g} GFLOP/s, over this "
            f"network's {flops_per_sample:,} FLOPs per sample",
            flops_per_second=rate.flops_per_second,
        )
    return scaled


def estimate_work(
    estimates: Sequence[StageEstimate],
    rates: Mapping[str, Rate],
    flops_per_sample: int | None = None,
) -> WorkEstimate:
    """Sum the stages' forward passes and, when every stage with work was measured, their time
    at the measured rates; with the network's ``flops_per_sample``, the work in FLOPs."""
    total = sum(e.forward_passes for e in estimates)
    unmeasured = [e.stage for e in estimates if e.forward_passes and e.stage not in rates]
    seconds = None
    if not unmeasured:
        seconds = sum(
            e.forward_passes / rates[e.stage].samples_per_second
            for e in estimates
            if e.forward_passes
        )
    parts = [f"{e.stage}: {e.forward_passes:,} ({e.basis})" for e in estimates]
    bounds = [f"{e.stage}: {e.note}" for e in estimates if e.note]
    if unmeasured:
        timing = (
            f"no time estimate: no {', '.join(unmeasured)} shard has been measured on this "
            "fleet yet"
        )
    else:
        timing = "time at " + "; ".join(
            f"{e.stage} {rates[e.stage].samples_per_second:,.0f} samples/s ({rates[e.stage].basis})"
            for e in estimates
            if e.forward_passes
        )
    return WorkEstimate(
        forward_passes=total,
        seconds=seconds,
        exact=all(e.exact for e in estimates),
        basis="; ".join(parts + bounds + [timing]),
        stages=tuple(estimates),
        rates=dict(rates),
        flops=total * flops_per_sample if flops_per_sample else None,
    )


def for_manifest(
    session: Session,
    benchmark: Benchmark,
    *,
    sigma: float,
    manifest: dict[str, Any],
    settings: Settings,
    rates: Mapping[str, Rate] | None = None,
) -> WorkEstimate:
    """The estimated work of submitting ``manifest`` to ``benchmark`` (``rates``: this fleet's,
    measured now when not given)."""
    item = planning_item(benchmark, sigma=sigma, manifest=manifest, settings=settings)
    estimates = stage_estimates(item, settings)
    if rates is None:
        rates = fleet_rates(session, (e.stage for e in estimates))
    return estimate_work(estimates, rates)
