"""Fourier sensitivity stage: heatmaps of the smoothed classifier's ACR and the base classifier's
accuracy under Fourier-basis perturbations (seed 000 §2.2, Fig. 3 and Fig. 7).

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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, model_validator

from certbench.errors import SensitivityError
from certbench.fourier import ChannelSigns, SensitivityProtocol, get_protocol, stream_key
from models.benchmarks.definitions import BenchmarkSchema, ImageSource, Samples
from models.benchmarks.sources import TestSetSpec, image_source_spec
from models.core.errors import StorageError
from models.core.settings import Settings
from models.stages.base import (
    MergeContext,
    MetricSpec,
    RecordedShard,
    RunContext,
    ShardOutput,
    ShardSpec,
    Stage,
    StageEstimate,
    StageOutcome,
    Uncertainty,
    Unit,
    UnitResult,
    check_shard_seed,
    per_image,
    recorded_data_hashes,
    run_seed_metadata,
)
from models.stages.fourier_text import band_range, protocol_note
from models.stages.registry import register
from models.stages.work import WorkItem

if TYPE_CHECKING:
    from certbench.fourier import SensitivityRecord

STAGE = "fourier_sensitivity"
#: The merged map is stored as one result (unit "").
MERGED = ""
BANDS = ("low", "mid", "high")
SHARD_FORWARD_PASSES = 20_000_000
"""Default size of a shard in forward passes (smoothed + base), at least one point."""
WHOLE_UNIT = 2**31 - 1
"""The pipeline's shard size: each unit (a run of points) is one shard."""
PAPER = "Sun et al. 2022, “A Spectral View of Randomized Smoothing under Common Corruptions”"
KEYS = {
    "acr": {band: f"fourier_acr_{band}" for band in BANDS},
    "base_accuracy": {band: f"fourier_base_{band}" for band in BANDS},
}
"""Leaderboard metric keys: mean ACR (smoothed) and base accuracy per radial band."""


#: Bounds of the block (``models.benchmarks.definitions`` bounds the shared ones): the grid's side
# and ε.
MAX_GRID = 256
MAX_EPSILON = 500.0


class FourierSensitivityBlock(ImageSource):
    """Definition block ``stages.fourier_sensitivity``.

    ``protocol`` is ``paper`` (seed 000's: ε = 4, 200 images, n0 = 100, n = 100,000, α = 0.001,
    every bin; about 1e10 forward passes per submission) or ``quick`` (NOT the paper's: 100
    images, n = 10,000, every 2nd bin per axis; about 1.3e8). ``n0``, ``n``, ``alpha``,
    ``epsilon``, ``stride`` and ``channel_signs`` override the protocol's value, ``skip`` and
    ``limit`` its image subset (every ``skip``-th image of ``repo``/``folder``, the first
    ``limit``); any change (or fewer images than the protocol's) labels it ``<name>+custom``.
    ``smoothed`` false skips the smoothed map (the base classifier's map is always computed: a
    CPU-only deployment still gets one). ``grid_size`` is the images' side (32 for CIFAR).
    ``points_per_shard`` overrides the default packing (module docstring).
    """

    protocol: Literal["paper", "quick"]
    smoothed: bool = True
    n0: Samples | None = None
    n: Samples | None = None
    alpha: float | None = Field(default=None, gt=0, lt=0.5)
    # the L2 norm of a Fourier basis perturbation; a 3×256×256 image in [0, 1] has norm ≤ 444
    epsilon: float | None = Field(default=None, gt=0, le=MAX_EPSILON)
    stride: int | None = Field(default=None, gt=0, le=MAX_GRID)
    channel_signs: ChannelSigns | None = None
    grid_size: int = Field(default=32, ge=2, le=MAX_GRID)
    points_per_shard: int | None = Field(default=None, gt=0, le=MAX_GRID * MAX_GRID)

    @model_validator(mode="after")
    def _resolvable(self) -> FourierSensitivityBlock:
        """The overrides must give a valid protocol on this grid (SensitivityError → 422-style)."""
        try:
            plan_of(self)
        except SensitivityError as err:
            raise ValueError(str(err)) from err
        return self


@dataclass(frozen=True)
class FourierPlan:
    """A block resolved: the protocol run, the image subset, the points and their shards."""

    sensitivity: SensitivityProtocol
    skip: int
    images: int
    points: int
    points_per_shard: int
    passes_per_point: int

    @property
    def shards(self) -> int:
        return -(-self.points // self.points_per_shard)

    @property
    def forward_passes(self) -> int:
        return self.points * self.passes_per_point


def plan_of(block: FourierSensitivityBlock) -> FourierPlan:
    """Resolve a block against its protocol (torch-free; used when a definition loads)."""
    base = get_protocol(block.protocol)
    skip = block.skip or base.skip
    available = -(-block.source_size // skip)
    images = min(block.limit if block.limit is not None else base.images, available)
    sensitivity = get_protocol(
        block.protocol,
        n0=block.n0,
        n=block.n,
        alpha=block.alpha,
        epsilon=block.epsilon,
        stride=block.stride,
        channel_signs=block.channel_signs,
        skip=skip,
        images=images,
    )
    points = len(sensitivity.points(block.grid_size))
    passes = images + (sensitivity.samples_per_point(images) if block.smoothed else 0)
    per_shard = block.points_per_shard or max(1, SHARD_FORWARD_PASSES // passes)
    return FourierPlan(sensitivity, skip, images, points, min(per_shard, points), passes)


@dataclass(frozen=True)
class FourierSpec:
    """The stored protocol row resolved against this deployment's folders."""

    images: TestSetSpec
    sensitivity: SensitivityProtocol
    smoothed: bool
    grid_size: int
    points: int
    points_per_shard: int
    stream: str
    protocol: dict[str, Any]

    def describe(self) -> dict[str, Any]:
        """The settings stored with the result: the stored row without local paths."""
        return {key: value for key, value in self.protocol.items() if key != "folder"}


def fourier_spec(protocol: Mapping[str, Any], settings: Settings) -> FourierSpec:
    """Resolve a benchmark's stored block (``protocol_row``) for a worker."""
    return FourierSpec(
        images=image_source_spec(protocol, name="_fourier_sensitivity", settings=settings),
        sensitivity=SensitivityProtocol.model_validate(protocol["sensitivity"]),
        smoothed=protocol["smoothed"],
        grid_size=protocol["grid_size"],
        points=protocol["points"],
        points_per_shard=protocol["points_per_shard"],
        stream=stream_key(protocol.get("config"), protocol["split"]),
        protocol=dict(protocol),
    )


def unit_name(start: int, stop: int) -> str:
    """The unit computing distinct points ``[start, stop)`` (row-major order)."""
    return f"points-{start:04d}-{stop:04d}"


def point_range(unit: str) -> tuple[int, int]:
    """Inverse of :func:`unit_name`."""
    _, start, stop = unit.split("-")
    return int(start), int(stop)


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
        """The block plus what it resolves to: the protocol run (``label``: ``paper``,
        ``quick`` or ``…+custom``), the image subset, the points, the shards and the cost."""
        assert isinstance(block, FourierSensitivityBlock)
        plan = plan_of(block)
        row = block.model_dump(mode="json")
        row.update(
            label=plan.sensitivity.name,
            description=plan.sensitivity.description,
            sensitivity=plan.sensitivity.model_dump(mode="json"),
            subset_skip=plan.skip,
            subset_limit=plan.images,
            num_images=plan.images,
            points=plan.points,
            points_per_shard=plan.points_per_shard,
            shards=plan.shards,
            forward_passes_per_point=plan.passes_per_point,
            forward_passes=plan.forward_passes,
        )
        return row

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
        return StageEstimate(
            stage=self.name,
            units=per_image(self.units(item, settings),
                            row["forward_passes_per_point"] // row["num_images"]),
            exact=True,
            basis=f"{row['points']:,} points × {row['num_images']:,} images × (1{smoothed})",
        )  # fmt: skip

    def run(self, item: WorkItem, shard: ShardSpec, context: RunContext) -> ShardOutput:
        """Compute the unit's points over every image, point by point; write the records."""
        from certbench.errors import DataSourceError
        from certbench.fourier import sensitivity_records, write_sensitivity_records
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
                sigma=item.sigma if spec.smoothed else None,
                test_set=spec.stream,
                batch_size=context.batch_size,
                device=context.device,
                on_progress=on_passes,
            )
            context.on_progress((k + 1) * count)
        metadata = {
            "submission_id": item.submission_id,
            "benchmark": item.benchmark,
            "unit": shard.unit,
            # shard files exist before the run ends: the commitment only (commit-reveal)
            "seed_commitment": item.seed_commitment,
            "sigma": item.sigma if spec.smoothed else None,
            "stream": spec.stream,
            "sensitivity": spec.sensitivity.model_dump(mode="json"),
            "data_hashes": hashes,
        }
        write_sensitivity_records(records, context.target, metadata)
        return ShardOutput(count=len(records), noun="perturbed image(s)")

    def merge(
        self,
        item: WorkItem,
        shards: Mapping[str, Sequence[RecordedShard]],
        context: MergeContext,
        settings: Settings,
    ) -> StageOutcome:
        """Concatenate the units' records in point order, assemble both heatmaps, summarise."""
        from certbench.fourier import assemble_heatmap, summarize_heatmap, write_sensitivity_records

        spec = fourier_spec(item.stages[self.name], settings)
        records: list[SensitivityRecord] = []
        hashes: list[Any] = []
        seconds = 0.0
        for unit in sorted(shards, key=point_range):
            for shard in sorted(shards[unit], key=lambda s: s.start):
                found, metadata = _read_shard(shard, spec, item)
                records += found
                hashes.append(metadata.get("data_hashes"))
                seconds += shard.seconds
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
        write_sensitivity_records(
            records,
            target,
            {
                "submission_id": item.submission_id,
                "benchmark": item.benchmark,
                "evaluator_version": context.evaluator_version,
                "sensitivity": spec.sensitivity.model_dump(mode="json"),
                "sigma": item.sigma if spec.smoothed else None,
                **run_seed_metadata(item),
                "stream": spec.stream,
            },
        )
        result = UnitResult(
            unit=MERGED,
            summary={
                "label": spec.sensitivity.name,
                "description": spec.sensitivity.description,
                "protocol": spec.sensitivity.model_dump(mode="json"),
                "smoothed": spec.smoothed,
                "sigma": item.sigma if spec.smoothed else None,
                "images": spec.images.num_images,
                "points": spec.points,
                "forward_passes": spec.protocol["forward_passes"],
                "bands": bands,
                "heatmap": heatmap.to_dict(),
            },
            records_path=relpath,
            count=len(records),
            seconds=seconds,
            protocol=spec.describe(),
            seeds={**run_seed_metadata(item), "stream": spec.stream},
            data_hashes=recorded_data_hashes(
                hashes, where=f"the Fourier sensitivity stage of submission {item.submission_id}"
            ),
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
        from models.stages.stage_intervals import sensitivity_uncertainty

        return sensitivity_uncertainty(protocol or {}, records, KEYS)

    def all_metric_specs(self) -> list[MetricSpec]:
        return self.metric_specs({"smoothed": True}, test_sets=1, bands=())

    def metric_specs(
        self, protocol: Mapping[str, Any] | None, *, test_sets: int, bands: Sequence[str]
    ) -> list[MetricSpec]:
        """Mean ACR per radial band of the smoothed map (columns), the base classifier's
        accuracy per band (columns only when the benchmark skips the smoothed map; otherwise
        REST fields and sort keys); none for a benchmark without the stage."""
        if protocol is None:
            return []
        smoothed = bool(protocol.get("smoothed", True))
        run = protocol_note(protocol)
        size = int(protocol.get("grid_size", 32))
        specs = [
            MetricSpec(
                KEYS["acr"][band],
                f"Fourier ACR {band}",
                f"mean ACR of the smoothed classifier over the {band_range(band, size)} cells "
                f"of the Fourier sensitivity heatmap (x + r·ε·U_ij, one cell per Fourier basis "
                f"image; {PAPER}, §2.2){run}",
                "radius",
                group="fourier",
                column=smoothed,
            )
            for band in BANDS
        ]
        specs += [
            MetricSpec(
                KEYS["base_accuracy"][band],
                f"Fourier base {band}",
                f"mean accuracy of the base classifier (not smoothed) over the "
                f"{band_range(band, size)} cells of the Fourier sensitivity heatmap "
                f"(Yin et al. 2019's map, as in {PAPER}){run}",
                "percent",
                group="fourier",
                column=not smoothed,
            )
            for band in BANDS
        ]
        return specs


def leaderboard_metrics(bands: Mapping[str, Any]) -> dict[str, float | None]:
    """Band means of both maps (None for the smoothed map of a base-only benchmark)."""
    out: dict[str, float | None] = {}
    for name, keys in KEYS.items():
        entry = bands.get(name)
        for band, key in keys.items():
            out[key] = None if entry is None else entry["bands"][band]
    return out


def _read_shard(
    shard: RecordedShard, spec: FourierSpec, item: WorkItem
) -> tuple[list[SensitivityRecord], dict[str, Any]]:
    """A shard's records and metadata, refused when computed with another protocol, σ or run
    seed."""
    from certbench.errors import RecordsError
    from certbench.fourier import read_sensitivity_records
    from certbench.smoothing import read_metadata

    try:
        metadata = read_metadata(shard.path)
        records = read_sensitivity_records(shard.path)
    except RecordsError as err:
        raise StorageError(f"Fourier sensitivity shard {str(shard.path)!r}: {err}") from err
    check_shard_seed(item, metadata, f"Fourier sensitivity shard {str(shard.path)!r}")
    sigma = item.sigma
    wanted = {
        "sensitivity": spec.sensitivity.model_dump(mode="json"),
        "sigma": sigma if spec.smoothed else None,
        "stream": spec.stream,
    }
    if any(metadata.get(key) != value for key, value in wanted.items()):
        raise StorageError(
            f"Fourier sensitivity shard {str(shard.path)!r} was computed with another protocol, "
            f"σ or image set than the benchmark's ({spec.sensitivity.name}, σ = "
            f"{wanted['sigma']}, {spec.stream}); re-run the submission fresh"
        )
    return records, metadata
