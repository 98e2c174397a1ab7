"""A toy evaluation stage, registered by the end-to-end tests through ``CERTBENCH_STAGE_PLUGINS``.

It proves the stage contract: this module is all it takes to add a stage (its protocol block,
units, run, merge and a leaderboard metric) — nothing in the pipeline, the tasks, the lease or the
migrations knows it. Each image's value is a deterministic function of (the run's seed, image
index), computed slowly (``seconds_per_image``) so a test can kill the worker in the middle of a
shard; ``expected_values`` is the reference an undisturbed run must reproduce. Its files follow
the stages' metadata convention through the shared helpers (``models.stages.shard_files``).
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


@register
class ToyStage(Stage):
    name = "toy"
    title = "Toy stage (tests)"
    queue = f"certbench.{name}"  # a queue of its own, as each packaged stage has
    protocol_model = ToyProtocol
    shard_size_setting = "one image per shard"

    def units(self, item: WorkItem, settings: Settings) -> list[Unit]:
        return [Unit(unit, item.stages[self.name]["images"]) for unit in UNITS]

    def shard_size(self, settings: Settings) -> int:
        return 1

    def run(self, item: WorkItem, shard: ShardSpec, context: RunContext) -> ShardOutput:
        """Compute the shard's values slowly; its file names the run seed's commitment."""
        pause = item.stages[self.name]["seconds_per_image"]
        values = []
        for done, index in enumerate(range(shard.start, shard.stop), start=1):
            time.sleep(pause)
            values.append(value(item.seed, shard.unit, index))
            context.on_progress(done)
        table = pa.table({"index": list(range(shard.start, shard.stop)), "value": values})
        write_json_table(table, context.target, shard_metadata(item, {}, **shard.placement))
        return ShardOutput(count=len(values))

    def merge(
        self, item: WorkItem, shards: Shards, context: MergeContext, settings: Settings
    ) -> StageOutcome:
        """Each unit's shards, verified and in image order, merged into one file with the
        revealed seed; the mean value is the leaderboard figure."""
        results, everything = [], []
        for unit in UNITS:
            found = read_shards(item, shards, json_table, label="toy", units=[unit])
            table = pa.concat_tables(found.parts)
            relpath, target = context.target_for(unit)
            write_json_table(table, target, found.merged_metadata(context, unit=unit))
            values = table.column("value").to_pylist()
            everything += values
            summary = {"values": values, "mean": sum(values) / len(values)}
            results.append(found.result(unit, summary=summary, records_path=relpath,
                                        count=len(values)))  # fmt: skip
        return StageOutcome(
            results=results,
            metrics={"toy_mean": sum(everything) / len(everything)},
            message=f"toy values of {len(everything)} image(s)",
        )

    def all_metric_specs(self) -> list[MetricSpec]:
        return [MetricSpec("toy_mean", "toy", "mean toy value (tests)", "number", group="toy")]
