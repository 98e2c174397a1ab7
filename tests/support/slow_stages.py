"""Three plug-in stages whose shards take a set time, each on a queue of its own.

The control-first tests (issue 34 §1) need shards of a known duration on several queues at
once: a worker takes messages from its queues in turn, so a control message waited behind one
shard of every busy stage queue. Each stage here has one unit; each image sleeps
``seconds_per_image`` inside ``Stage.run`` (no CPU, so a loaded machine does not stretch it) and
yields a deterministic value, like ``tests.support.toy_stage``. Registered in the worker processes
through ``CERTBENCH_STAGE_PLUGINS=tests.support.slow_stages`` and in a test process by importing
this module.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from models.stages.base import MetricSpec, ShardOutput, Stage, StageOutcome, Unit
from models.stages.registry import register
from models.stages.shard_files import json_table, read_shards, shard_metadata, write_json_table

if TYPE_CHECKING:
    from models.core.settings import Settings
    from models.stages.base import MergeContext, RunContext, Shards, ShardSpec
    from models.stages.work import WorkItem

NAMES = ("slow_a", "slow_b", "slow_c")


class SlowProtocol(BaseModel):
    """Definition block ``stages.slow_*``."""

    model_config = ConfigDict(extra="forbid")

    images: int = Field(gt=0, le=1_000)
    seconds_per_image: float = Field(default=1.0, ge=0, le=60)


def value(seed: int, stage: str, index: int) -> float:
    """The figure of one image: a fixed function of its key, in [0, 1)."""
    digest = hashlib.sha256(f"{seed}/{stage}/{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class SlowStage(Stage):
    """One unit of ``images`` images, one image per shard, each taking ``seconds_per_image``."""

    protocol_model = SlowProtocol
    shard_size_setting = "one image per shard"

    def units(self, item: WorkItem, settings: Settings) -> list[Unit]:
        return [Unit("", item.stages[self.name]["images"])]

    def shard_size(self, settings: Settings) -> int:
        return 1

    def run(self, item: WorkItem, shard: ShardSpec, context: RunContext) -> ShardOutput:
        pause = item.stages[self.name]["seconds_per_image"]
        values = []
        for done, index in enumerate(range(shard.start, shard.stop), start=1):
            time.sleep(pause)
            values.append(value(item.seed, self.name, index))
            context.on_progress(done)
        table = pa.table({"index": list(range(shard.start, shard.stop)), "value": values})
        write_json_table(table, context.target, shard_metadata(item, {}, **shard.placement))
        return ShardOutput(count=len(values))

    def merge(
        self, item: WorkItem, shards: Shards, context: MergeContext, settings: Settings
    ) -> StageOutcome:
        found = read_shards(item, shards, json_table, label=self.name, units=[""])
        table = pa.concat_tables(found.parts)
        relpath, target = context.target_for("")
        write_json_table(table, target, found.merged_metadata(context, unit=""))
        values = table.column("value").to_pylist()
        mean = sum(values) / len(values)
        result = found.result("", summary={"values": values, "mean": mean}, records_path=relpath,
                              count=len(values))  # fmt: skip
        return StageOutcome(
            results=[result],
            metrics={f"{self.name}_mean": mean},
            message=f"{self.name}: {len(values)} image(s)",
        )

    def all_metric_specs(self) -> list[MetricSpec]:
        return [MetricSpec(f"{self.name}_mean", self.name, "mean value (tests)", "number",
                           group=self.name)]  # fmt: skip


for _name in NAMES:
    register(
        type(
            f"SlowStage_{_name}",
            (SlowStage,),
            {"name": _name, "title": f"Slow stage {_name} (tests)", "queue": f"certbench.{_name}"},
        )
    )


def stage_blocks(seconds_per_image: float, images: int = 1) -> dict[str, dict[str, float]]:
    """The definition's ``stages`` blocks enabling every slow stage."""
    return {name: {"images": images, "seconds_per_image": seconds_per_image} for name in NAMES}
