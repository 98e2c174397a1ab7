"""The centred frequency grid of Fourier sensitivity analysis: points, mirrors, representatives.

Pure index arithmetic (numpy only, no torch), so benchmark definitions and the service can plan a
heatmap (how many distinct basis images, which ones a shard computes) without loading the model
stack. ``certbench.fourier.basis`` builds the basis images on these points; its docstring has the
full comparison with Sun et al., ECCV 2022, and Yin et al. 2019.

A ``size``×``size`` centred grid has offsets ``−size//2 … size−size//2−1`` per axis (DC in the
middle, as in ``certbench.fourier.spectral``). U_{i,j} = U_{−i,−j} (Hermitian symmetry), so a point
and its mirror are one experiment: each distinct basis image is computed once, under its
representative (the one with the smaller centred row-major index, the bin Yin et al.'s loop meets
first, identical to ``certbench.fourier.spectral.hermitian_half``'s kept half plus the
self-mirrored bins).
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import numpy as np

from certbench.errors import SensitivityError

ChannelSigns: TypeAlias = Literal["independent", "shared"]
"""Sign r per channel (the paper's words, as Yin et al. 2019 mean them) or one per image (the
released code); see ``certbench.fourier.basis``. Here, with no pydantic, so that the computation
(``basis``, ``sensitivity``) imports on a machine that has only torch's stack (the GPU image)."""
CHANNEL_SIGNS: tuple[ChannelSigns, ...] = ("independent", "shared")

Point: TypeAlias = tuple[int, int]
"""(i, j): centred frequency offsets in cycles per image, i down the rows, j along the columns."""


def grid_offsets(size: int, stride: int = 1) -> np.ndarray:
    """Centred offsets ``−size//2 … size−size//2−1`` that are multiples of ``stride``.

    The set is closed under negation modulo ``size`` (so mirrors of grid points are grid points)
    and always holds 0, the lowest frequency.
    """
    check_size(size)
    if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1:
        raise SensitivityError(f"stride must be an integer >= 1, got {stride!r}")
    offsets = np.arange(-(size // 2), size - size // 2)
    return offsets[offsets % stride == 0]


def mirror(point: Point, size: int) -> Point:
    """(−i, −j) wrapped into the centred range: the other cell of the same basis image."""
    i, j = check_point(point, size)
    return _wrap(-i, size), _wrap(-j, size)


def canonical(point: Point, size: int) -> Point:
    """The representative of {p, mirror(p)} that is certified (smaller centred row-major index)."""
    i, j = check_point(point, size)
    other = mirror((i, j), size)
    return min((i, j), other, key=lambda p: _flat(p, size))


def distinct_points(size: int, stride: int = 1) -> list[Point]:
    """One representative per distinct basis image of the strided grid, in row-major order."""
    offsets = [int(f) for f in grid_offsets(size, stride)]
    return [(i, j) for i in offsets for j in offsets if canonical((i, j), size) == (i, j)]


def point_key(point: Point) -> str:
    """Stable text key of a grid point for random streams and file names, e.g. ``"-3,5"``."""
    return f"{point[0]},{point[1]}"


def check_size(size: int) -> None:
    """Raise SensitivityError unless ``size`` is an integer grid size >= 2."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 2:
        raise SensitivityError(f"grid size must be an integer >= 2, got {size!r}")


def check_point(point: Point, size: int) -> Point:
    """``point`` as a pair of ints on the centred grid; SensitivityError names the range."""
    check_size(size)
    lo, hi = -(size // 2), size - size // 2 - 1
    try:
        i, j = (int(point[0]), int(point[1]))
    except (TypeError, ValueError, IndexError) as err:
        raise SensitivityError(f"grid point must be a pair of integers, got {point!r}") from err
    if len(point) != 2 or not (lo <= i <= hi and lo <= j <= hi):
        raise SensitivityError(
            f"grid point {tuple(point)!r} is outside the centred {size}×{size} grid: "
            f"both offsets must lie in [{lo}, {hi}]"
        )
    return i, j


def _wrap(offset: int, size: int) -> int:
    return (offset + size // 2) % size - size // 2


def _flat(point: Point, size: int) -> int:
    return (point[0] + size // 2) * size + point[1] + size // 2
