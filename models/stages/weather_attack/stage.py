"""Worst-case weather stage: the simulation attack of Wang et al. (NeurIPS 2022 ML Safety Workshop)
in the pipeline.

Wang, Ba, Zhang, Zhang, Kadambi, Soatto, Wong & Hsieh, "Evaluating Worst Case Adversarial
Weather Perturbations Robustness", NeurIPS 2022 ML Safety Workshop
(https://openreview.net/forum?id=Q69Aj3P0PtV): random weather over-estimates robustness; an image
is safe only if no rain/snow the simulator can produce fools the classifier. The science is
``certbench.weather.attack`` (the PGD search of ``certbench.weather.search``, with restarts on the
particles' T_i and R_i inside the set Δ of ``certbench.weather.threat``); this stage runs it on
the benchmark's clean test subset.

Units, one per (weather, severity) and classifier, each over the whole image subset:
``rain-3`` (base classifier: random and worst-case accuracy), ``smoothed-rain-3`` (SmoothAdv-
style attack on the smoothed classifier, then CERTIFY with the benchmark's n0, n, α and the
submission's σ) and ``examples`` (the first few images, for the paper's Fig. 1 panels). Why per
set rather than one unit holding every set: a set is what the results table shows (one stored
result per row), every shard then costs about the same (a base shard ≈ restarts × (steps + 1)
forward+backward passes per image, a smoothed one ≈ one CERTIFY per image, the cost of a
certification shard, so certification's shard size fits both), and the core's random streams
are keyed by (seed, weather, severity, image index, restart), so splitting by set or by image
range cannot change a record.

Seeds, per draw (``certbench.weather.attack`` says why): restart 0 starts at the published
random test set's draw (the block's public ``seed``), so every entry's random-weather accuracy
is measured on the same weather; restarts 1+, SmoothAdv's and CERTIFY's noise come from the
run's secret seed (``item.seed``, ``models.submissions.run_seeds``). Shard files carry its
commitment, merged records its revealed value (``certbench weather-attack --seed <revealed>
--weather-seed <seed>`` reproduces them).

The attack checks every iterate against Δ; a violation (a bug, never the submitter's fault) is
re-raised as :class:`WeatherAttackError`, which fails the submission as a worker error naming
the violated bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from models.core.errors import StorageError
from models.stages.base import ShardOutput, Stage, StageOutcome, Uncertainty, Unit, UnitResult
from models.stages.registry import register
from models.stages.shard_files import ShardSet, read_shards, shard_metadata
from models.stages.weather_attack.examples import merge_examples, run_examples
from models.stages.weather_attack.figures import leaderboard_metrics, weather_metric_specs
from models.stages.weather_attack.protocol import (
    EXAMPLES,
    STAGE,
    WeatherAttackError,
    WeatherAttackProtocol,
    WeatherSpec,
    certify_protocol,
    check_one_protocol,
    parse_unit,
    protocol_digest,
    stored_row,
    unit_name,
    weather_spec,
    work_estimate,
)

if TYPE_CHECKING:
    from models.benchmarks.definitions import BenchmarkSchema
    from models.core.settings import Settings
    from models.stages.base import (
        MergeContext,
        MetricSpec,
        RunContext,
        Shards,
        ShardSpec,
        StageEstimate,
    )
    from models.stages.work import WorkItem


@register
class WeatherAttack(Stage):
    name = STAGE
    title = "Worst-case weather (simulation attack)"
    queue = "certbench.weather"
    protocol_model = WeatherAttackProtocol
    batch_size_env = "CERTBENCH_WEATHER_BATCH_SIZE"
    default_batch_size = 128

    def protocol_row(self, block: BaseModel, definition: BenchmarkSchema) -> dict[str, Any]:
        """The block plus the derived subset, the resolved seed and the CERTIFY protocol."""
        assert isinstance(block, WeatherAttackProtocol)
        return stored_row(block, definition)

    def units(self, item: WorkItem, settings: Settings) -> list[Unit]:
        row = item.stages[self.name]
        count = row["num_images"]
        kinds = ("base", "smoothed") if row["smoothed"] else ("base",)
        units = [
            Unit(unit_name(kind, weather, severity), count)
            for kind in kinds
            for weather in row["weathers"]
            for severity in row["severities"]
        ]
        if row["examples"]:
            units.append(Unit(EXAMPLES, row["examples"]))
        return units

    def estimate(self, item: WorkItem, settings: Settings) -> StageEstimate:
        """Per unit kind, from the protocol (``weather_protocol.work_estimate``)."""
        return work_estimate(item, self.units(item, settings))

    def run(self, item: WorkItem, shard: ShardSpec, context: RunContext) -> ShardOutput:
        """Attack the shard's images on its unit's set (or draw its examples); write records."""
        from certbench.errors import ThreatModelError
        from models.stages.inputs import data_hashes, images_for, model_for

        spec = weather_spec(item.stages[self.name], context.settings)
        hashes = data_hashes(spec.images)  # raises DatasetMismatchError before any work
        images = images_for(spec.images)
        window = slice(shard.start, shard.stop)
        metadata = shard_metadata(
            item,
            hashes,
            **shard.placement,
            protocol=spec.describe(),
            certify=certify_protocol(item),
            protocol_sha256=protocol_digest(item, spec),
        )
        model = model_for(item, context.device)
        try:
            if shard.unit == EXAMPLES:
                count = run_examples(item, model, images, window, spec, context, metadata)
            else:
                count = _run_attack(item, model, images, window, spec, shard, context, metadata)
        except ThreatModelError as err:
            raise WeatherAttackError(
                f"weather attack {shard.unit!r} (images {shard.start}..{shard.stop - 1}) of "
                f"submission {item.submission_id}: {err}"
            ) from err
        return ShardOutput(
            count=count,
            metadata={k: str(v) for k, v in metadata.items() if not isinstance(v, dict)},
            noun="image(s) attacked",
        )

    def merge(
        self, item: WorkItem, shards: Shards, context: MergeContext, settings: Settings
    ) -> StageOutcome:
        """Merge each unit's shards (one protocol), summarise per set and over all sets, draw
        the example panels; the leaderboard figures come from the merged records only."""
        from certbench.errors import RecordsError
        from certbench.weather import read_weather_metadata, summarize_weather

        spec = weather_spec(item.stages[self.name], settings)
        found = read_shards(item, shards, lambda path: (read_weather_metadata(path), None),
                            label="weather-attack", wrap=(RecordsError,))  # fmt: skip
        check_one_protocol(item, found.metadata)
        found.data_hashes()  # shards computed on other bytes are refused before anything is written
        results: list[UnitResult] = []
        everything: dict[str, list[Any]] = {"base": [], "smoothed": []}
        for unit in self.units(item, settings):
            if unit.name == EXAMPLES:
                results.append(merge_examples(item, spec, found.unit(EXAMPLES), context))
                continue
            result, records = _merge_attack(item, spec, unit, found.unit(unit.name), context)
            everything[parse_unit(unit.name)[0]] += records
            results.append(result)
        summaries = {kind: summarize_weather(rs) for kind, rs in everything.items() if rs}
        metrics = leaderboard_metrics(summaries)
        attacked = summaries["base"].figures["images"]
        return StageOutcome(
            results=results,
            metrics=metrics,
            message=f"attacked {attacked:.0f} image(s) with worst-case weather "
            f"({len(spec.weathers)} weather(s) × {len(spec.severities)} severities)",
        )

    has_intervals = True

    def uncertainty(
        self, protocol: Mapping[str, Any] | None, records: Mapping[str, Path]
    ) -> Uncertainty:
        """Clopper-Pearson or cluster-bootstrap intervals over the images (``stage_intervals``)."""
        from models.stages.intervals import weather_uncertainty

        return weather_uncertainty(records)

    def all_metric_specs(self) -> list[MetricSpec]:
        return self.metric_specs({"weathers": ["rain", "snow"], "smoothed": True},
                                 test_sets=1, bands=())  # fmt: skip

    def metric_specs(
        self, protocol: Mapping[str, Any] | None, *, test_sets: int, bands: Sequence[str]
    ) -> list[MetricSpec]:
        """Worst-case accuracy per weather and random-weather accuracy (base classifier);
        certified accuracy at r = 0 and 0.25 and ACR under attacked weather (smoothed)."""
        return [] if protocol is None else weather_metric_specs(protocol)


# ------------------------------------------------------------------------------------ run


def _run_attack(
    item: WorkItem,
    model: Any,
    images: Any,
    window: slice,
    spec: WeatherSpec,
    shard: ShardSpec,
    context: RunContext,
    metadata: dict[str, Any],
) -> int:
    from certbench.smoothing import fallback_metadata
    from certbench.weather import attack_base, attack_smoothed, write_weather_records

    # CERTIFY of the attacked images with the engine's device defaults (certify_batch_size None,
    # amp "auto": on CUDA bf16 and batches of 4,096); CERTBENCH_WEATHER_BATCH_SIZE sizes the
    # attack's batches of images.

    kind, weather, severity = parse_unit(shard.unit)
    common: dict[str, Any] = {
        "weathers": (weather,),
        "severities": (severity,),
        "config": spec.attack_config(),
        "indices": images.indices[window],
        "batch_size": context.batch_size,
        "device": context.device,
        "on_batch": context.on_progress,
        "run_seed": item.seed,
    }
    x, y = images.images[window], images.labels[window]
    if kind == "smoothed":
        records: list[Any] = attack_smoothed(
            model, x, y, noise_samples=spec.noise_samples, **certify_protocol(item),
            certify_batch_size=None, amp="auto", **common,
        )  # fmt: skip
    else:
        records = attack_base(model, x, y, **common)
    metadata = {**metadata, **fallback_metadata(model)}
    write_weather_records(records, context.target, metadata, kind=kind)
    return len(records)


# ------------------------------------------------------------------------------------ merge


def _merge_attack(
    item: WorkItem, spec: WeatherSpec, unit: Unit, found: ShardSet, context: MergeContext
) -> tuple[UnitResult, list[Any]]:
    """One set's merged records, its summary row (with the gap for the base classifier)."""
    from certbench.errors import RecordsError
    from certbench.weather import (
        WeatherSet,
        merge_weather_records,
        read_weather_records,
        summarize_weather,
        write_weather_records,
    )

    kind, weather, severity = parse_unit(unit.name)
    try:
        parts: list[Any] = [read_weather_records(s.path) for s in found.shards]
        records: list[Any] = merge_weather_records(parts)
    except RecordsError as err:
        raise StorageError(f"weather-attack unit {unit.name!r}: {err}") from err
    keys = {(r.weather, r.severity) for r in records}
    if keys != {(weather, severity)} or len(records) != unit.num_images:
        raise StorageError(
            f"weather-attack unit {unit.name!r} holds {len(records)} record(s) of {sorted(keys)}"
            f", expected {unit.num_images} of ({weather!r}, {severity}); re-run it fresh"
        )
    wset = WeatherSet.for_level(weather, severity, spec.row["truncation"])
    relpath, target = context.target_for(unit.name)
    metadata = found.merged_metadata(
        context,
        benchmark=item.benchmark,
        unit=unit.name,
        protocol=spec.describe(),
        certify=certify_protocol(item),
        perturbation_set=wset.describe(),
        weather_seed=spec.seed,
    )
    write_weather_records(records, target, metadata, kind=kind)
    row = dict(summarize_weather(records).rows[0])
    if kind == "base":
        row["gap"] = row["random_accuracy"] - row["worst_case_accuracy"]
    protocol = {**spec.describe(), "perturbation_set": wset.describe()}
    if kind == "smoothed":
        protocol["certify"] = certify_protocol(item)
    seeds = {"weather_seed": spec.seed, "stream": f"{weather}/{severity}"}
    result = found.result(unit.name, summary={"kind": kind, **row}, records_path=relpath,
                          count=len(records), protocol=protocol, seeds=seeds)  # fmt: skip
    return result, records
