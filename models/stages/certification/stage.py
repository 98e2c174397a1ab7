"""Certification stage: randomized smoothing (Cohen et al. 2019) on every test set.

Units are the benchmark's test sets; a shard certifies images ``[start, stop)`` of one test set's
protocol subset with ``certbench.smoothing.core.certify``, whose per-image random streams derive
from (the run's seed, test set, image index), so any sharding gives the records of one unsharded
run. Merging computes each test set's metrics from its per-image records
(``certbench.smoothing.metrics``) and the leaderboard figures: mACR, certified accuracy on the
radius grid, the p̂_A distribution (Sun et al., ICML 2025), band means (Sun et al., ECCV 2022,
Table 1). The stage's protocol is the benchmark's own (``protocol`` and ``test_sets`` in the
definition), so it takes no ``stages`` block and every benchmark runs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from models.benchmarks.sources import TestSetSpec
from models.core.queue import DEFAULT_QUEUE
from models.stages.base import MetricSpec, ShardOutput, Stage, StageOutcome, Unit, UnitResult
from models.stages.certification.cost import (
    cost_metric_specs,
    cost_metrics,
    device_types,
    network_figures,
    throughput,
)
from models.stages.certification.keys import BANDS, PA_QUANTILES, RADIUS_KEYS
from models.stages.certification.provenance import built_by, records_metadata, stream_key
from models.stages.certification.results import TestSetResult as TestSetResult  # re-exported
from models.stages.certification.results import stored_summary
from models.stages.registry import register
from models.stages.shard_files import json_table, read_shards, shard_metadata

if TYPE_CHECKING:
    from models.core.settings import Settings
    from models.stages.base import MergeContext, RunContext, Shards, ShardSpec, StageEstimate
    from models.stages.work import WorkItem


@register
class Certification(Stage):
    name = "certification"
    title = "Randomized-smoothing certification"
    queue = DEFAULT_QUEUE
    default_batch_size = 1000
    batch_size_env = "CERTBENCH_CERTIFY_BATCH_SIZE"

    def enabled(self, item: WorkItem) -> bool:
        return True

    def folder(self, unit: str) -> str:
        """Certification keeps the layout ``records/<submission>/<test set>/``."""
        return unit

    def units(self, item: WorkItem, settings: Settings) -> list[Unit]:
        return [Unit(ts.name, ts.num_images) for ts in item.test_sets]

    def estimate(self, item: WorkItem, settings: Settings) -> StageEstimate:
        """Exact: CERTIFY draws n0 selection and n estimation samples per image (the stage
        never abstains early), one forward pass each, on every test set."""
        images = sum(ts.num_images for ts in item.test_sets)
        basis = f"{images:,} images over {len(item.test_sets)} test set(s) × "
        basis += f"(n0 {item.n0:,} + n {item.n:,}) samples"
        return self.per_image_estimate(item, settings, item.n0 + item.n, exact=True, basis=basis)

    def run(self, item: WorkItem, shard: ShardSpec, context: RunContext) -> ShardOutput:
        """CERTIFY the shard's images with the benchmark protocol; write the records."""
        import torch

        from certbench.smoothing import certify, fallback_metadata, write_records
        from models.stages.inputs import data_hashes, images_for, model_for

        test_set = item.test_set(shard.unit)
        hashes = data_hashes(test_set)  # raises DatasetMismatchError before any work
        images = images_for(test_set)
        window = slice(shard.start, shard.stop)
        done = 0

        def on_record(_record: object) -> None:
            nonlocal done
            done += 1
            context.on_progress(done)

        model = model_for(item, context.device)
        records = certify(
            model,
            images.images[window].to(torch.float32).div_(255.0),
            images.labels[window],
            sigma=item.sigma,
            n0=item.n0,
            n=item.n,
            alpha=item.alpha,
            batch_size=context.batch_size,
            seed=item.seed,
            device=context.device,
            indices=images.indices[window],
            test_set=stream_key(item, test_set),
            on_record=on_record,
        )
        fields = {
            **records_metadata(item, test_set, shard),
            "device_type": torch.device(context.device).type,
            **fallback_metadata(model),
        }
        metadata = shard_metadata(item, hashes, **fields)
        write_records(records, context.target, metadata=metadata)
        return ShardOutput(count=len(records))

    def merge(
        self, item: WorkItem, shards: Shards, context: MergeContext, settings: Settings
    ) -> StageOutcome:
        """Merge each test set's shard records, compute its metrics and the leaderboard's."""
        from certbench.smoothing import write_table_atomic
        from models.stages.certification.intervals import TERMS_UNIT, entry_intervals

        network = network_figures(item.manifest, item.flops_per_sample)
        merged = [self._merge_test_set(item, ts, shards, context, network) for ts in item.test_sets]
        results = [result for result, _ in merged]
        bounds, terms = entry_intervals(
            {r.unit: table for r, table in merged}, {ts.name: ts.band for ts in item.test_sets}
        )
        if terms is not None:
            write_table_atomic(terms, context.target_for(TERMS_UNIT)[1])
        return StageOutcome(
            results=results,
            metrics={
                **leaderboard_metrics(item, results),
                **cost_metrics(item, results, network["flops_per_sample"]),
                **bounds,
            },
            message=f"certified on {len(results)} test set(s)",
            entry={
                "test_sets": len(results),
                "count": sum(r.count for r in results),
                "seconds": float(sum(r.seconds for r in results)),
            },
        )

    def _merge_test_set(
        self,
        item: WorkItem,
        test_set: TestSetSpec,
        shards: Shards,
        context: MergeContext,
        network: Mapping[str, int],
    ) -> tuple[UnitResult, Any]:
        """The test set's stored result and its merged records table; its protocol holds the
        network's parameters and FLOPs per sample and the shards' measured throughput."""
        import pyarrow as pa

        from certbench.smoothing import records_to_table, summarize, table_to_records, write_records

        name = test_set.name
        found = read_shards(item, shards, json_table, label="certification", units=[name],
                            hashes_of=f"test set {name!r}")  # fmt: skip
        found.data_hashes()  # shards computed on other bytes are refused before anything is written
        records = table_to_records(pa.concat_tables(found.parts))
        relpath, target = context.target_for(name)
        metadata = found.merged_metadata(
            context,
            test_set=name,
            protocol_version=item.protocol_version,
            noise_stream_key=stream_key(item, test_set),
        )
        write_records(records, target, metadata=metadata)
        summary = summarize(records)
        table = records_to_table(records)
        result = found.result(
            name,
            summary=stored_summary(summary, item.protocol_version, table),
            records_path=relpath,
            count=summary.count,
            protocol={
                "n0": item.n0,
                "n": item.n,
                "alpha": item.alpha,
                "sigma": item.sigma,
                **built_by(found.metadata, name),
                "network": dict(network),
                "throughput": throughput(
                    count=summary.count,
                    seconds=found.seconds,
                    samples_per_image=item.n0 + item.n,
                    devices=device_types(found.metadata),
                ),
            },
        )
        return result, table

    def all_metric_specs(self) -> list[MetricSpec]:
        return self.metric_specs(None, test_sets=2, bands=BANDS)

    def metric_specs(
        self, protocol: Mapping[str, Any] | None, *, test_sets: int, bands: Sequence[str]
    ) -> list[MetricSpec]:
        """ACR with the p_A summary beside it (Sun et al., ICML 2025), certified accuracy on the
        radius grid, abstain rate, band means when the benchmark has bands; the smoothed model's
        clean accuracy and the p_A quantiles are REST fields and sort keys, not columns."""
        many = test_sets > 1
        specs = [
            MetricSpec(
                "macr",  # one field on every benchmark, so clients read it alike everywhere
                "mACR" if many else "ACR",
                "average certified radius (ℓ2, [0,1] pixels), mean over test sets"
                if many
                else "average certified radius (ℓ2, [0,1] pixels) of the one test set, i.e. the "
                "mean over test sets (mACR) every benchmark stores as macr",
                "radius",
            ),
            MetricSpec(
                "pa_median",
                "p_A median",
                "median over images of p̂_A = n_y/n, the base model's accuracy under noise "
                "(Sun, Mao, Müller & Vechev, ICML 2025)",
                "probability",
            ),
            MetricSpec("cert_acc_000", "r = 0", "certified accuracy at radius 0 (clean, smoothed)"),
            MetricSpec("cert_acc_025", "r = 0.25", "certified accuracy at ℓ2 radius 0.25"),
            MetricSpec("cert_acc_050", "r = 0.5", "certified accuracy at ℓ2 radius 0.5"),
            MetricSpec("cert_acc_075", "r = 0.75", "certified accuracy at ℓ2 radius 0.75"),
            MetricSpec("cert_acc_100", "r = 1.0", "certified accuracy at ℓ2 radius 1.0"),
            MetricSpec(
                "abstain_rate",
                "abstain",
                "fraction of images the smoothed model abstains on",
                higher_is_better=False,
            ),
        ]
        specs += [
            MetricSpec(
                f"band_{band}",
                f"{band} band",
                f"mean ACR over the {band}-frequency corruptions (bands of Sun et al., ECCV 2022)",
                "radius",
            )
            for band in BANDS
            if band in bands
        ]
        specs += cost_metric_specs()
        specs += [
            MetricSpec("clean_accuracy", "clean", "accuracy of the smoothed model's PREDICT",
                       column=False),
            *(
                MetricSpec(key, f"p_A q{quantile}", f"{quantile} quantile of p̂_A = n_y/n over "
                           "images (Sun et al., ICML 2025)", "probability", column=False)
                for key, quantile in PA_QUANTILES.items()
            ),
        ]  # fmt: skip
        return specs


def leaderboard_metrics(item: WorkItem, results: Sequence[UnitResult]) -> dict[str, float | None]:
    """Means over test sets (mACR = mean ACR) and band means; None where the benchmark has no
    test set in a band."""
    from certbench.smoothing import macr

    if not results:
        raise ValueError(f"submission {item.submission_id} has no certification results")
    band_of = {ts.name: ts.band for ts in item.test_sets}

    def mean(values: Sequence[float]) -> float:
        return float(np.mean(values))

    summaries = [r.summary for r in results]
    metrics: dict[str, float | None] = {
        "macr": macr({r.unit: r.summary["acr"] for r in results}),
        "clean_accuracy": mean([s["clean_accuracy"] for s in summaries]),
        "abstain_rate": mean([s["abstain_rate"] for s in summaries]),
        "pa_median": mean([s["pa_median"] for s in summaries]),
    }
    for radius, key in RADIUS_KEYS.items():
        metrics[key] = mean([s["certified_accuracy"][f"{radius:g}"] for s in summaries])
    for key, quantile in PA_QUANTILES.items():
        metrics[key] = mean([s["pa_quantiles"][quantile] for s in summaries])
    for band in BANDS:
        acrs = [r.summary["acr"] for r in results if band_of.get(r.unit) == band]
        metrics[f"band_{band}"] = mean(acrs) if acrs else None
    return metrics
