"""Fourier-lens stage: HFF, consistent distance, pixel-path HFF and Jacobian norm of an entry.

Fridovich-Keil, Bartoldson, Diffenderfer, Kailkhura & Bremer, "Models Out of Line: A Fourier Lens
on Distribution Shift Robustness", NeurIPS 2022 (§3, Tables 1–3): per model, on the
clean test set, the high-frequency fraction (HFF) and consistent distance (CD) along Fourier
amplitude and phase interpolation paths, the HFF of pixel-space paths within and between classes
(Fridovich-Keil, Gontijo Lopes & Roelofs 2021) and the Jacobian norm (Hoffman, Roberts & Yaida
2019). The science is ``certbench.lens.lens``; this module plans, shards and merges it.

Units are the classifier variants: ``base`` (the submission's deterministic network; every kind)
and, when the block says ``smoothed: true``, ``smoothed`` (paths scored with the smoothed
classifier's vote fractions at the submission's σ; no Jacobian, which is the base network's).
A unit's "images" are the core's work units (one path, or one Jacobian image) on the flat index
of ``lens_plan``: a shard is the range ``[start, stop)`` of that index, ``CERTBENCH_SHARD_SIZE``
work units long (a Fourier path is 100 forwards, a certified image 100,000, so lens shards are
short). Records depend only on (model, clean set, protocol, seed, work unit), so any sharding
merges to the records of one direct ``lens_records`` call.

Seeds, decided per draw (``certbench.lens.lens`` says why): the Fourier and pixel *pairs*
define what every entry of the benchmark is measured on, so they come from the benchmark's public
``lens_seed`` (in the fingerprint that makes figures comparable); the *noise* of the smoothed
unit and the random Jacobian projections (``jacobian_projections`` > 0) are Monte Carlo draws of
estimators that are only valid when independent of the model, so they come from the run's secret
seed (``item.seed``, commit-reveal: ``models.submissions.run_seeds``). Shard files, written while
the run goes on, carry the seed's commitment; merged records and stored seeds carry the revealed
seed (``run_seed_metadata``), and ``certbench fourier-lens --seed <revealed> --pairs-seed
<lens_seed>`` reproduces them. Exact base-classifier figures (the paper's Jacobian, every path's
softmax) do not depend on the run seed.

The plan's size is stored with the benchmark (``protocol_row``) from the definition alone, so the
API never loads data: Fourier paths, ``num_classes``·pixel_pairs within-class and
C(num_classes, 2)·pixel_pairs between-class paths, and the Jacobian images. Every shard checks it
against ``lens_plan(labels).size`` of the loaded clean set and fails the run with a clear message
when they differ (a class missing from the set, a wrong ``num_classes``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from models.benchmarks.definitions import BenchmarkSchema
from models.benchmarks.sources import TestSetSpec
from models.core.errors import BenchmarkDefinitionError, StorageError
from models.core.settings import Settings
from models.stages.base import MetricSpec, ShardOutput, Stage, StageOutcome, Unit, UnitResult
from models.stages.fourier_lens.block import (
    BASE,
    KINDS,
    LENS_VERSION,
    METRICS,
    NYQUIST_METRICS,
    PAPER,
    PRESETS,
    SMOOTHED,
    SMOOTHED_SUFFIX,
    LensBlock,
    LensSpec,
    feasibility,
    fingerprint,
    lens_spec,
    work_estimate,
    work_sizes,
)
from models.stages.fourier_lens.figures import figure_specs, lens_metric_specs, metric_keys
from models.stages.registry import register
from models.stages.shard_files import read_shards, shard_metadata

__all__ = [
    "BASE", "KINDS", "LENS_VERSION", "METRICS", "NYQUIST_METRICS", "PAPER", "PRESETS", "SMOOTHED",
    "SMOOTHED_SUFFIX", "FourierLens", "LensBlock", "LensSpec", "figure_specs", "lens_spec",
]  # fmt: skip

if TYPE_CHECKING:
    import torch

    from models.stages.base import (
        MergeContext,
        RunContext,
        Shards,
        ShardSpec,
        StageEstimate,
        Uncertainty,
    )
    from models.stages.work import WorkItem


@lru_cache(maxsize=1)
def _float_images(spec: TestSetSpec) -> torch.Tensor:
    """The clean set as float32 in [0, 1], converted once per worker process."""
    from models.stages.inputs import images_for

    return images_for(spec).as_float()


@register
class FourierLens(Stage):
    name = "fourier_lens"
    title = "Fourier lens (HFF, consistent distance, Jacobian norm)"
    queue = "certbench.lens"
    protocol_model = LensBlock
    default_batch_size = 1000
    batch_size_env = "CERTBENCH_LENS_BATCH_SIZE"

    def protocol_row(self, block: BaseModel, definition: BenchmarkSchema) -> dict[str, Any]:
        """The block plus the resolved protocol, the plan's size per unit and its fingerprint.

        Raises BenchmarkDefinitionError when the clean set cannot hold the protocol's pairs.
        """
        assert isinstance(block, LensBlock)
        skip, limit, count = block.subset(definition.protocol)
        parameters = block.parameters()
        problems = feasibility(block, parameters, count, definition.num_classes)
        if problems:
            raise BenchmarkDefinitionError(
                f"benchmark {definition.name!r} stages.fourier_lens: {'; '.join(problems)}"
            )
        kinds = block.run_kinds()
        sizes = work_sizes(parameters, kinds, definition.num_classes)
        units = {BASE: sum(sizes.values())}
        if block.smoothed:
            units[SMOOTHED] = sum(n for k, n in sizes.items() if k != "jacobian")
        row = block.model_dump(mode="json")
        row.update(
            subset_skip=skip,
            subset_limit=limit,
            num_images=count,
            parameters=parameters,
            run_kinds=kinds,
            lens_seed=block.seed if block.seed is not None else definition.protocol.seed,
            label=block.label(),
            lens_version=LENS_VERSION,
            work=sizes,
            units=units,
        )
        row["fingerprint"] = fingerprint({**row, "seed": row["lens_seed"]})
        return row

    def units(self, item: WorkItem, settings: Settings) -> list[Unit]:
        return [Unit(name, size) for name, size in item.stages[self.name]["units"].items()]

    def estimate(self, item: WorkItem, settings: Settings) -> StageEstimate:
        """Per kind, from the stored plan and the entry's preprocessing (``work_estimate``)."""
        return work_estimate(item.stages[self.name], item.manifest, item.num_classes)

    def run(self, item: WorkItem, shard: ShardSpec, context: RunContext) -> ShardOutput:
        """Compute the shard's work units with ``lens_records`` and write their records."""
        from certbench.errors import DataSourceError, LensError
        from certbench.lens import lens_plan, lens_records, write_lens_records
        from models.stages.inputs import data_hashes, images_for, model_for

        spec = lens_spec(item.stages[self.name], context.settings)
        hashes = data_hashes(spec.images)  # raises DatasetMismatchError before any work
        images = images_for(spec.images)
        protocol = spec.protocol(shard.unit, item.sigma)
        try:
            planned = lens_plan(images.labels, protocol, spec.pairs_seed).size
        except LensError as err:
            raise DataSourceError(
                f"the clean set {spec.images.source!r} cannot hold the benchmark's Fourier-lens "
                f"protocol: {err}; fix the benchmark definition"
            ) from err
        if planned != spec.units[shard.unit]:
            raise DataSourceError(
                f"the Fourier-lens plan of {spec.images.source!r} has {planned} work units but "
                f"the benchmark stored {spec.units[shard.unit]} for {shard.unit!r}: the clean "
                f"set lacks a class or num_classes ({item.num_classes}) is wrong; fix the "
                "benchmark definition"
            )
        records = lens_records(
            model_for(item, context.device),
            _float_images(spec.images),
            images.labels,
            protocol=protocol,
            seed=item.seed,
            pairs_seed=spec.pairs_seed,
            units=range(shard.start, shard.stop),
            indices=images.indices,
            batch_size=context.batch_size,
            device=context.device,
            on_progress=context.on_progress,
        )
        metadata = shard_metadata(
            item,
            hashes,
            **shard.placement,
            fingerprint=spec.fingerprint,
            protocol=protocol.to_dict(),
            pairs_seed=spec.pairs_seed,
        )
        write_lens_records(records, context.target, metadata)
        return ShardOutput(count=len(records), noun="lens unit(s)")

    def merge(
        self, item: WorkItem, shards: Shards, context: MergeContext, settings: Settings
    ) -> StageOutcome:
        """Per unit: merged records, their summary (means, 95 % intervals); the means are the
        leaderboard figures (``<metric>_smoothed`` for the smoothed unit)."""
        spec = lens_spec(item.stages[self.name], settings)
        results, metrics = [], dict.fromkeys(metric_keys(spec.row))
        wanted = set(metrics)
        for unit, size in spec.units.items():
            result, means = self._merge_unit(item, spec, unit, size, shards, context)
            if unit == BASE:
                nyquist = result.summary.get("nyquist", {})
                metrics.update({k: v["mean"] for k, v in nyquist.items() if k in wanted})
            results.append(result)
            suffix = "" if unit == BASE else SMOOTHED_SUFFIX
            metrics.update({f"{name}{suffix}": value for name, value in means.items()})
        paths = results[0].count
        return StageOutcome(
            results=results,
            metrics=metrics,
            message=f"Fourier lens ({spec.label}): {paths} path(s) and Jacobian image(s)",
        )

    def _merge_unit(
        self,
        item: WorkItem,
        spec: LensSpec,
        unit: str,
        size: int,
        shards: Shards,
        context: MergeContext,
    ) -> tuple[UnitResult, dict[str, float]]:
        from certbench.errors import LensError
        from certbench.lens import read_lens_metadata, read_lens_records, summarize
        from certbench.lens import write_lens_records as write

        def differs(metadata: Mapping[str, Any]) -> str:
            found = str(metadata.get("fingerprint"))[:12]
            return f"under another protocol (fingerprint {found}…, benchmark {wanted[:12]}…)"

        wanted = spec.fingerprint
        found = read_shards(
            item, shards, lambda path: (read_lens_metadata(path), read_lens_records(path)),
            label="Fourier-lens", units=[unit], wrap=(LensError,),
            expect={"fingerprint": wanted}, differs=differs,
            hashes_of=f"Fourier-lens unit {unit!r} of submission {item.submission_id}",
        )  # fmt: skip
        records = found.records()
        if [r.unit for r in records] != list(range(size)):
            raise StorageError(
                f"the {unit!r} Fourier-lens records of submission {item.submission_id} do not "
                f"cover work units 0 … {size - 1} once each; re-run the submission fresh"
            )
        summary = summarize(records)
        relpath, target = context.target_for(unit)
        fields = {"unit": unit, "fingerprint": spec.fingerprint, "pairs_seed": spec.pairs_seed}
        write(records, target, found.merged_metadata(context, benchmark=item.benchmark, **fields))
        sigma = item.sigma if unit == SMOOTHED else None
        core = spec.protocol(unit, item.sigma).to_dict()
        result = found.result(
            unit,
            summary={"label": spec.label, "sigma": sigma, **summary.to_dict()},
            records_path=relpath,
            count=len(records),
            protocol={**spec.describe(), "unit_protocol": core},
            seeds={"pairs_seed": spec.pairs_seed},
        )
        return result, summary.means()

    # ---- uncertainty ----------------------------------------------------------------------------

    has_intervals = True

    def uncertainty(
        self, protocol: Mapping[str, Any] | None, records: Mapping[str, Path]
    ) -> Uncertainty:
        """The summaries' Gaussian intervals; path terms for paired bootstrap tests."""
        from models.stages.intervals import lens_uncertainty

        suffixes = {unit: "" if unit == BASE else SMOOTHED_SUFFIX for unit in records}
        return lens_uncertainty(records, suffixes, metric_keys(protocol or {}))

    # ---- presentation ---------------------------------------------------------------------------

    def all_metric_specs(self) -> list[MetricSpec]:
        return self.metric_specs(
            {"run_kinds": list(KINDS), "smoothed": True, "label": "paper"}, test_sets=1, bands=()
        )

    def metric_specs(
        self, protocol: Mapping[str, Any] | None, *, test_sets: int, bands: Sequence[str]
    ) -> list[MetricSpec]:
        """The base classifier's seven lens figures as columns (kinds the benchmark runs); the
        smoothed classifier's as REST fields and sort keys only (``lens_figures``)."""
        return [] if protocol is None else lens_metric_specs(protocol)
