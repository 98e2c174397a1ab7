"""The torch-free half of Fourier sensitivity analysis: grid geometry and protocols."""

from __future__ import annotations

import subprocess
import sys

import pytest

from certbench.errors import SensitivityError
from certbench.fourier.grid import canonical, distinct_points, grid_offsets, mirror
from certbench.fourier.protocol import get_protocol, stream_key
from certbench.fourier.spectral import hermitian_half


@pytest.mark.parametrize("size", [32, 8, 9, 2])
@pytest.mark.parametrize("stride", [1, 2, 3])
def test_distinct_points_are_the_hermitian_half_of_the_spectral_module(size, stride) -> None:
    """Representatives by index arithmetic = the kept half + self-mirrored bins that the
    spectral module uses to draw Hermitian spectra (one convention in the project)."""
    keep, self_mirrored = hermitian_half(size)
    half = size // 2
    offsets = [int(f) for f in grid_offsets(size, stride)]
    expected = [
        (i, j)
        for i in offsets
        for j in offsets
        if bool(keep[i + half, j + half] | self_mirrored[i + half, j + half])
    ]
    points = distinct_points(size, stride)
    assert points == expected
    assert all(canonical(mirror(p, size), size) == p for p in points)


def test_protocol_modules_do_not_import_torch() -> None:
    """Benchmark definitions are validated by the API and CLI without the model stack."""
    code = (
        "import sys, certbench.fourier.protocol, certbench.fourier.grid; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_stream_key_and_overrides() -> None:
    assert stream_key(None, "test") == "default/test"
    assert stream_key("fc05_a2_s3", "test") == "fc05_a2_s3/test"
    custom = get_protocol("quick", stride=4)
    assert custom.name == "quick+custom" and "stride=4" in custom.description
    assert get_protocol("quick", stride=2) is get_protocol("quick")  # no change, no label
    with pytest.raises(SensitivityError, match="channel_signs"):
        get_protocol("paper", channel_signs="both")
