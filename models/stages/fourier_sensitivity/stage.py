"""Fourier sensitivity stage: heatmaps of the smoothed classifier's ACR and the base classifier's
accuracy under Fourier-basis perturbations (Sun et al., ECCV 2022, §2.2, Fig. 3 and Fig. 7).

The science is ``certbench.fourier.sensitivity`` (one call per grid point, the certification
engine's CERTIFY inside): for every distinct basis image U_ij of the centred grid, each test image
becomes x + r·ε·U_ij, and the heatmap cell is the smoothed classifier's ACR over the images (at
the submission's σ) beside the base classifier's accuracy (always computed, one forward pass per
image). Seeds: the run's secret seed (``item.seed``, commit-reveal:
``models.submissions.run_seeds``; shard files carry its commitment, merged records the revealed
seed) and the stream key ``<config or "default">/<split>``, the CLI's, so ``certbench
fourier-heatmap --seed <revealed>`` on the same images gives the same records. Both draws come from
that seed: CERTIFY's noise and each image's random perturbation sign (``certbench.fourier.basis``);
the grid and the images are fixed by the protocol, so no draw needs the public seed.

Sharding by grid points. A shard is a few grid points × ALL the images: every unit of the stage
is a run of consecutive distinct points (``points_per_shard`` of them), computed by one shard.
Why points and not images: a point's cell is an ACR over all its images, so a shard that holds
whole points is a finished piece of the map; the cost per point is fixed by the protocol
(images × (n0 + n) passes: 2e7 for the paper's, 1e6 for the quick one), so points per shard is
the natural knob; and the number of shards is decided by the stored protocol alone, so every
worker plans the same shards without a deployment setting. The default (``points_per_shard``
omitted) packs about ``SHARD_FORWARD_PASSES`` forward passes into a shard: one point of the
paper's protocol (minutes on a GPU), 19 points of the quick one, the whole grid for a base-only
map. A unit's ``num_images`` counts perturbed images (points × images), which is what the
progress bars show. Records of a (point, image) depend only on the seed, the stream key, the
point and the image index, never on the shard, so merging is concatenation in point order and
equals one unsharded run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from certbench.errors import SensitivityError
from models.core.errors import StorageError
from models.stages.base import MetricSpec, ShardOutput, Stage, StageOutcome, Uncertainty, Unit
from models.stages.fourier_sensitivity.figures import (
    KEYS,
    fourier_metric_specs,
    leaderboard_metrics,
)
from models.stages.fourier_sensitivity.protocol import (
    SHARD_FORWARD_PASSES as SHARD_FORWARD_PASSES,
)
from models.stages.fourier_sensitivity.protocol import (
    FourierSensitivityBlock,
    fourier_spec,
    point_range,
    stored_row,
    unit_name,
)
from models.stages.registry import register
from models.stages.shard_files import read_shards, shard_metadata

if TYPE_CHECKING:
    from certbench.fourier import SensitivityRecord
    from models.benchmarks.definitions import BenchmarkSchema
    from models.core.settings import Settings
    from models.stages.base import MergeContext, RunContext, Shards, ShardSpec, StageEstimate
    from models.stages.work import WorkItem

STAGE = "fourier_sensitivity"
#: The merged map is stored as one result (unit "").
MERGED = ""
WHOLE_UNIT = 2**31 - 1
"""The pipeline's shard size: each unit (a run of points) is one shard."""


ENGINE_DEFAULTS: dict[str, Any] = {"certify_batch_size": None, "amp": "auto", "compile": None}
"""CERTIFY of the smoothed map runs with the engine's device defaults (``certbench.smoothing.
defaults``: on CUDA bf16 and batches of 4,096, on CPU fp32 and 256, compiled for long calls);
``CERTBENCH_FOURIER_BATCH_SIZE`` sizes the base classifier's batches of perturbed images."""


@register
class FourierSensitivity(Stage):
    name = STAGE
    title = "Fourier sensitivity heatmaps"
    queue = "certbench.fourier"
    protocol_model = FourierSensitivityBlock
    shard_size_setting = "points_per_shard (the benchmark's stages.fourier_sensitivity block)"
    default_batch_size = 1000
    batch_size_env = "CERTBENCH_FOURIER_BATCH_SIZE"

    def protocol_row(self, block: BaseModel, definition: BenchmarkSchema) -> dict[str, Any]:
        """The block plus what it resolves to (``fourier_protocol.stored_row``)."""
        assert isinstance(block, FourierSensitivityBlock)
        return stored_row(block)

    def units(self, item: WorkItem, settings: Settings) -> list[Unit]:
        """Runs of ``points_per_shard`` consecutive distinct points, each points × images."""
        row = item.stages[self.name]
        points, step, images = row["points"], row["points_per_shard"], row["num_images"]
        return [
            Unit(unit_name(start, min(start + step, points)), (min(step, points - start)) * images)
            for start in range(0, points, step)
        ]

    def shard_size(self, settings: Settings) -> int:
        """Each unit is one shard: its size is set per benchmark by ``points_per_shard``."""
        return WHOLE_UNIT

    def estimate(self, item: WorkItem, settings: Settings) -> StageEstimate:
        """Exact: a perturbed image (point × image) costs one base forward pass, plus CERTIFY's
        n0 + n (no early abstention) for the smoothed map: ``plan_of``'s count per point."""
        row = item.stages[self.name]
        p = row["sensitivity"]
        smoothed = f" + (n0 {p['n0']:,} + n {p['n']:,})" if row["smoothed"] else ""
        passes = row["forward_passes_per_point"] // row["num_images"]
        basis = f"{row['points']:,} points × {row['num_images']:,} images × (1{smoothed})"
        return self.per_image_estimate(item, settings, passes, exact=True, basis=basis)

    def run(self, item: WorkItem, shard: ShardSpec, context: RunContext) -> ShardOutput:
        """Compute the unit's points over every image, point by point; write the records."""
        from certbench.errors import DataSourceError
        from certbench.fourier import sensitivity_records, write_sensitivity_records
        from certbench.smoothing import fallback_metadata
        from models.stages.inputs import data_hashes, images_for, model_for

        spec = fourier_spec(item.stages[self.name], context.settings)
        hashes = data_hashes(spec.images)  # raises DatasetMismatchError before any work
        images = images_for(spec.images)
        if tuple(images.images.shape[-2:]) != (spec.grid_size, spec.grid_size):
            raise DataSourceError(
                f"the Fourier sensitivity images are {tuple(images.images.shape[-2:])}, but the "
                f"benchmark's block says grid_size = {spec.grid_size}; fix the definition"
            )
        start, stop = point_range(shard.unit)
        points = spec.sensitivity.points(spec.grid_size)[start:stop]
        model = model_for(item, context.device)
        x, count = images.as_float(), len(images)
        per_point = count + (spec.sensitivity.samples_per_point(count) if spec.smoothed else 0)
        sigma = item.sigma if spec.smoothed else None
        records: list[SensitivityRecord] = []
        for k, point in enumerate(points):
            done = 0

            def on_passes(passes: int, k: int = k) -> None:
                nonlocal done
                done += passes
                context.on_progress(k * count + min(count, done * count // per_point))

            records += sensitivity_records(
                model,
                x,
                images.labels,
                images.indices,
                [point],
                spec.sensitivity,
                item.seed,
                sigma=sigma,
                test_set=spec.stream,
                batch_size=context.batch_size,
                device=context.device,
                on_progress=on_passes,
                **ENGINE_DEFAULTS,
            )
            context.on_progress((k + 1) * count)
        fields = {"unit": shard.unit, "sigma": sigma, "stream": spec.stream,
                  **fallback_metadata(model)}  # fmt: skip
        sensitivity = spec.sensitivity.model_dump(mode="json")
        metadata = shard_metadata(item, hashes, **fields, sensitivity=sensitivity)
        write_sensitivity_records(records, context.target, metadata)
        return ShardOutput(count=len(records), noun="perturbed image(s)")

    def merge(
        self, item: WorkItem, shards: Shards, context: MergeContext, settings: Settings
    ) -> StageOutcome:
        """Concatenate the units' records in point order, assemble both heatmaps, summarise."""
        from certbench.errors import RecordsError
        from certbench.fourier import (
            assemble_heatmap,
            read_sensitivity_records,
            summarize_heatmap,
            write_sensitivity_records,
        )
        from certbench.smoothing import read_metadata

        spec = fourier_spec(item.stages[self.name], settings)
        sigma = item.sigma if spec.smoothed else None
        wanted = {"sensitivity": spec.sensitivity.model_dump(mode="json"), "sigma": sigma,
                  "stream": spec.stream}  # fmt: skip

        differs = "with another protocol, σ or image set than the benchmark's "
        differs += f"({spec.sensitivity.name}, σ = {sigma}, {spec.stream})"
        found = read_shards(
            item, shards, lambda path: (read_metadata(path), read_sensitivity_records(path)),
            label="Fourier sensitivity", units=sorted(shards, key=point_range),
            wrap=(RecordsError,), expect=wanted, differs=lambda _: differs,
        )  # fmt: skip
        records: list[SensitivityRecord] = found.records()
        expected = spec.points * spec.images.num_images
        if len(records) != expected:
            raise StorageError(
                f"the Fourier sensitivity shards of submission {item.submission_id} hold "
                f"{len(records)} records, not {spec.points} points × "
                f"{spec.images.num_images} images = {expected}; re-run the submission fresh"
            )
        try:
            heatmap = assemble_heatmap(records, size=spec.grid_size, stride=spec.sensitivity.stride)
        except SensitivityError as err:
            raise StorageError(f"Fourier sensitivity shards: {err}") from err
        bands = summarize_heatmap(heatmap)
        relpath, target = context.target_for(MERGED)
        fields = {"sensitivity": wanted["sensitivity"], "sigma": sigma, "stream": spec.stream}
        metadata = found.merged_metadata(context, benchmark=item.benchmark, **fields)
        write_sensitivity_records(records, target, metadata)
        result = found.result(
            MERGED,
            summary={
                "label": spec.sensitivity.name,
                "description": spec.sensitivity.description,
                "protocol": spec.sensitivity.model_dump(mode="json"),
                "smoothed": spec.smoothed,
                "sigma": sigma,
                "images": spec.images.num_images,
                "points": spec.points,
                "forward_passes": spec.row["forward_passes"],
                "bands": bands,
                "heatmap": heatmap.to_dict(),
            },
            records_path=relpath,
            count=len(records),
            protocol=spec.describe(),
            seeds={"stream": spec.stream},
        )
        return StageOutcome(
            results=[result],
            metrics=leaderboard_metrics(bands),
            message=(
                f"Fourier sensitivity ({spec.sensitivity.name} protocol): {spec.points} "
                f"basis images × {spec.images.num_images} images"
            ),
        )

    has_intervals = True

    def uncertainty(
        self, protocol: Mapping[str, Any] | None, records: Mapping[str, Path]
    ) -> Uncertainty:
        """Bootstrap intervals over images of the band means (``stage_intervals``)."""
        from models.stages.intervals import sensitivity_uncertainty

        return sensitivity_uncertainty(protocol or {}, records, KEYS)

    def all_metric_specs(self) -> list[MetricSpec]:
        return self.metric_specs({"smoothed": True}, test_sets=1, bands=())

    def metric_specs(
        self, protocol: Mapping[str, Any] | None, *, test_sets: int, bands: Sequence[str]
    ) -> list[MetricSpec]:
        return fourier_metric_specs(protocol)
