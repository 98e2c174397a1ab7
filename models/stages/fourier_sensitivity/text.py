"""Texts of the Fourier sensitivity stage: band ranges in its help texts, the protocol note and
the cost of a run as people read it (``models.stages.fourier_sensitivity.figures``; the web
section)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def band_edges(size: int = 32) -> tuple[float, float]:
    """Radial band edges in cycles/image: thirds of the Nyquist frequency ``size/2``, the
    corruption sets' edges (``certbench.fourier.spectral.BAND_EDGES``, not imported: it pulls
    torch)."""
    return size / 6, size / 3


def band_range(band: str, size: int) -> str:
    """A band's frequency range in words, for help texts."""
    low, high = band_edges(size)
    return {
        "low": f"low-frequency (radial frequency < {low:.3g} cycles/image)",
        "mid": f"mid-frequency ({low:.3g} to {high:.3g} cycles/image)",
        "high": f"high-frequency (≥ {high:.3g} cycles/image)",
    }[band]


def protocol_note(protocol: Mapping[str, Any]) -> str:
    """What a help text says of the protocol run (the paper's, or which other one)."""
    label = protocol.get("label")
    if not label:
        return ""
    if label == "paper":
        return "; the paper's protocol"
    return f"; {label} protocol, NOT the paper's ({protocol.get('description', '')})"


def cost_text(forward_passes: int) -> str:
    """A forward-pass count as people read it (1.03e10 → "1.0e10 forward passes")."""
    if forward_passes < 1_000_000:
        return f"{forward_passes:,} forward passes"
    return f"{forward_passes:.1e} forward passes".replace("e+", "e")
