"""The Fourier sensitivity stage's protocol: its definition block, what the block resolves to (the
protocol run, the image subset, the grid points and their shards) and the stored row resolved for
a worker; unit names. The stage, and why it shards by grid points, is
``models.stages.fourier_sensitivity.stage``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, model_validator

from certbench.errors import SensitivityError
from certbench.fourier import ChannelSigns, SensitivityProtocol, get_protocol, stream_key
from models.benchmarks.definitions import ImageSource, Samples
from models.benchmarks.sources import image_source_spec
from models.core.settings import Settings
from models.stages.base import StageSpec

#: The block's fields that override its protocol's, in the order a custom label lists them.
OVERRIDES = ("n0", "n", "alpha", "epsilon", "stride", "channel_signs")
SHARD_FORWARD_PASSES = 20_000_000
"""Default size of a shard in forward passes (smoothed + base), at least one point."""
#: Bounds of the block (``models.benchmarks.definitions`` bounds the shared ones): the grid's side
# and ε.
MAX_GRID = 256
MAX_EPSILON = 500.0


class FourierSensitivityBlock(ImageSource):
    """Definition block ``stages.fourier_sensitivity``.

    ``protocol`` is ``paper`` (Sun et al., ECCV 2022's: ε = 4, 200 images, n0 = 100,
    n = 100,000, α = 0.001, every bin; about 1e10 forward passes per submission) or ``quick``
    (NOT the paper's: 100 images, n = 10,000, every 2nd bin per axis; about 1.3e8). ``n0``,
    ``n``, ``alpha``, ``epsilon``, ``stride`` and ``channel_signs`` override the protocol's value,
    ``skip`` and ``limit`` its image subset (every ``skip``-th image of ``repo``/``folder``, the
    first ``limit``); any change (or fewer images than the protocol's) labels it
    ``<name>+custom``. ``smoothed`` false skips the smoothed map (the base classifier's map is
    always computed: a CPU-only deployment still gets one). ``grid_size`` is the images' side (32
    for CIFAR). ``points_per_shard`` overrides the default packing
    (``models.stages.fourier_sensitivity.stage``).
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
    overrides = {key: getattr(block, key) for key in OVERRIDES}
    sensitivity = get_protocol(block.protocol, **overrides, skip=skip, images=images)
    points = len(sensitivity.points(block.grid_size))
    passes = images + (sensitivity.samples_per_point(images) if block.smoothed else 0)
    per_shard = block.points_per_shard or max(1, SHARD_FORWARD_PASSES // passes)
    return FourierPlan(sensitivity, skip, images, points, min(per_shard, points), passes)


def stored_row(block: FourierSensitivityBlock) -> dict[str, Any]:
    """The row stored with the benchmark: the block plus what it resolves to, the protocol run
    (``label``: ``paper``, ``quick`` or ``…+custom``), the image subset, the points, the shards
    and the cost."""
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


@dataclass(frozen=True)
class FourierSpec(StageSpec):
    """The stored protocol row resolved against this deployment's folders."""

    sensitivity: SensitivityProtocol
    smoothed: bool
    grid_size: int
    points: int
    points_per_shard: int
    stream: str


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
        row=dict(protocol),
    )


def unit_name(start: int, stop: int) -> str:
    """The unit computing distinct points ``[start, stop)`` (row-major order)."""
    return f"points-{start:04d}-{stop:04d}"


def point_range(unit: str) -> tuple[int, int]:
    """Inverse of :func:`unit_name`."""
    _, start, stop = unit.split("-")
    return int(start), int(stop)
