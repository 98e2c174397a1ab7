"""Protocols of Fourier sensitivity analysis (Sun et al., ECCV 2022, §2.2 and Appendix): what one
heatmap costs.

Torch-free (pydantic and ``certbench.fourier.grid`` only), so a benchmark definition's
``fourier_sensitivity`` block is validated, labelled and costed where no model is loaded; the
computation itself is ``certbench.fourier.sensitivity``.

Two protocols ship. ``paper`` is Sun et al.'s: ε = 4, 200 test images per cell, n0 = 100,
n = 100,000, α = 0.001, every bin of the 32×32 grid (514 distinct basis images): about 1.03e10
forward passes. ``quick`` is cheaper and NOT the paper's (100 images, n = 10,000, every 2nd bin
per axis: about 1.3e8). Any field can be overridden; the result is then named ``paper+custom`` /
``quick+custom`` and says what changed, wherever it is shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from certbench.errors import SensitivityError
from certbench.fourier.grid import CHANNEL_SIGNS, ChannelSigns, Point, distinct_points

SIGN_NAMES: dict[ChannelSigns, str] = {"shared": "per-image", "independent": "per-channel"}
"""What users read and type (``fourier-heatmap --signs``, pages) for each ``channel_signs``."""
SIGN_TEXT: dict[ChannelSigns, str] = {
    "shared": "one random sign per image, shared by its channels (Sun et al. 2022's released "
    "certify_fourier.py, behind the paper's heatmaps)",
    "independent": "an independent random sign per channel (Yin et al. 2019's reading of "
    "“we treat the RGB channels independently”)",
}
"""How pages and the CLI say which sign convention a heatmap used."""


def channel_signs_of(name: str) -> ChannelSigns:
    """``per-image`` → ``shared``, ``per-channel`` → ``independent`` (the stored names pass)."""
    lookup = {v: k for k, v in SIGN_NAMES.items()} | {k: k for k in CHANNEL_SIGNS}
    if name not in lookup:
        raise SensitivityError(
            f"signs {name!r} is unknown; use per-image (Sun et al.'s release) or per-channel"
        )
    return lookup[name]


class SensitivityProtocol(BaseModel):
    """Parameters of one Fourier-sensitivity run; part of a benchmark definition.

    Images are every ``skip``-th of the split, the first ``images`` of those (``skip=50`` gives
    200 of CIFAR's 10,000 test images, spread over the split as the 500-image protocol is).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    description: str = ""
    epsilon: float = Field(default=4.0, gt=0)
    n0: int = Field(default=100, ge=1)
    n: int = Field(default=100_000, ge=1)
    alpha: float = Field(default=0.001, gt=0, lt=1)
    images: int = Field(default=200, ge=1)
    skip: int = Field(default=50, ge=1)
    stride: int = Field(default=1, ge=1)
    channel_signs: ChannelSigns = "shared"
    """Default: one sign per image, the convention of the published heatmaps (Sun et al.'s
    ``certify_fourier.py``); ``independent`` is Yin et al.'s per-channel reading. Stored
    protocols say which they used (records made before this default hold ``independent``)."""

    def points(self, size: int = 32) -> list[Point]:
        """The distinct grid points this protocol certifies, one per basis image."""
        return distinct_points(size, self.stride)

    def samples_per_point(self, images: int | None = None) -> int:
        """Smoothed forward passes for one point: images × (n0 + n)."""
        return (self.images if images is None else images) * (self.n0 + self.n)

    def forward_passes(self, size: int = 32, images: int | None = None) -> int:
        """Smoothed forward passes of the whole heatmap (the base map adds one per image)."""
        return len(self.points(size)) * self.samples_per_point(images)


PROTOCOLS: dict[str, SensitivityProtocol] = {
    "paper": SensitivityProtocol(
        name="paper",
        description="Sun et al. 2022's protocol: 200 images, n0=100, n=100,000, α=0.001, every bin",
    ),
    "quick": SensitivityProtocol(
        name="quick",
        description="cheaper, NOT the paper's: 100 images, n=10,000, every 2nd bin per axis",
        n=10_000,
        images=100,
        skip=100,
        stride=2,
    ),
}
"""Shipped protocols; ``quick`` costs ~1/80 of ``paper`` and is labelled so wherever shown."""


def get_protocol(name: str, **overrides: Any) -> SensitivityProtocol:
    """A shipped protocol by name, with fields replaced if given (then named ``name+custom``)."""
    if name not in PROTOCOLS:
        raise SensitivityError(f"protocol {name!r} is unknown; use one of {sorted(PROTOCOLS)}")
    base = PROTOCOLS[name]
    changed = {k: v for k, v in overrides.items() if v is not None and getattr(base, k) != v}
    if not changed:
        return base
    return protocol_from_dict(
        {**base.model_dump(), **changed, "name": f"{name}+custom", "description": _custom(changed)}
    )


def protocol_from_dict(data: Mapping[str, Any]) -> SensitivityProtocol:
    """Validate a protocol (e.g. a benchmark definition's block) with one readable error."""
    try:
        return SensitivityProtocol.model_validate(dict(data))
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'protocol'}: {e['msg']}"
            for e in err.errors(include_url=False)
        )
        raise SensitivityError(f"invalid Fourier-sensitivity protocol: {problems}") from err


def stream_key(config: str | None, split: str) -> str:
    """The test-set part of every random stream of a heatmap over one dataset config and split:
    the CLI and the service's stage use the same key, so their records agree for one seed."""
    return f"{config or 'default'}/{split}"


def _custom(changed: Mapping[str, Any]) -> str:
    return "custom (not the paper's): " + ", ".join(f"{k}={v}" for k, v in changed.items())
