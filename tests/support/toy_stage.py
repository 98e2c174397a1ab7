"""A toy evaluation stage, registered by the end-to-end tests through ``CERTBENCH_STAGE_PLUGINS``.

It proves the stage contract: this module is all it takes to add a stage (its protocol block,
units, run, merge and a leaderboard metric) — nothing in the pipeline, the tasks, the lease or the
migrations knows it. Each image's value is a deterministic function of (the run's seed, image
index), computed slowly (``seconds_per_image``) so a test can kill the worker in the middle of a
shard; ``expected_values`` is the reference an undisturbed run must reproduce.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field

from models.core.settings import Settings
from models.stages.base import (
    MergeContext,
    MetricSpec,
    RecordedShard,
    RunContext,
    ShardOutput,
    ShardSpec,
    Stage,
    StageOutcome,
    Unit,
    UnitResult,
    run_seed_metadata,
)
from models.stages.registry import register
from models.stages.work import WorkItem

UNITS = ("left", "right")


class ToyProtocol(BaseModel):
    """Definition block ``stages.toy``."""

    model_config = ConfigDict(extra="forbid")

    images: int = Field(gt=0, le=100_000)  # bounded like every packaged stage's fields
    seconds_per_image: float = Field(default=0.0, ge=0, le=60)


def value(seed: int, unit: str, index: int) -> float:
    """The toy figure of one image: a fixed function of its key, in [0, 1)."""
    digest = hashlib.sha256(f"{seed}/{unit}/{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def expected_values(seed: int, images: int) -> dict[str, list[float]]:
    return {unit: [value(seed, unit, i) for i in range(images)] for unit in UNITS}


def _write(table: pa.Table, path: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


@register
class ToyStage(Stage):
    name = "toy"
    title = "Toy stage (tests)"
    queue = "certbench.toy"
    protocol_model = ToyProtocol
    shard_size_setting = "one image per shard"

    def units(self, item: WorkItem, settings: Settings) -> list[Unit]:
        return [Unit(unit, item.stages[self.name]["images"]) for unit in UNITS]

    def shard_size(self, settings: Settings) -> int:
        return 1

    def run(self, item: WorkItem, shard: ShardSpec, context: RunContext) -> ShardOutput:
        pause = item.stages[self.name]["seconds_per_image"]
        values = []
        for done, index in enumerate(range(shard.start, shard.stop), start=1):
            time.sleep(pause)
            values.append(value(item.seed, shard.unit, index))
            context.on_progress(done)
        indices = list(range(shard.start, shard.stop))
        _write(pa.table({"index": indices, "value": values}), context.target)
        return ShardOutput(count=len(values))

    def merge(
        self,
        item: WorkItem,
        shards: Mapping[str, Sequence[RecordedShard]],
        context: MergeContext,
        settings: Settings,
    ) -> StageOutcome:
        results, everything = [], []
        for unit in UNITS:
            recorded = sorted(shards[unit], key=lambda s: s.start)
            table = pa.concat_tables([pq.read_table(s.path) for s in recorded])
            relpath, target = context.target_for(unit)
            _write(table, target)
            values = table.column("value").to_pylist()
            everything += values
            results.append(
                UnitResult(
                    unit=unit,
                    summary={"values": values, "mean": sum(values) / len(values)},
                    records_path=relpath,
                    count=len(values),
                    seconds=sum(s.seconds for s in recorded),
                    seeds=run_seed_metadata(item),
                )
            )
        return StageOutcome(
            results=results,
            metrics={"toy_mean": sum(everything) / len(everything)},
            message=f"toy values of {len(everything)} image(s)",
        )

    def all_metric_specs(self) -> list[MetricSpec]:
        return [MetricSpec("toy_mean", "toy", "mean toy value (tests)", "number", group="toy")]
