"""Fourier heatmap figures (PNG and SVG) with matplotlib's object API (no pyplot, thread-safe).

Conventions, shared by the CLI and the web pages: the lowest frequency (DC) sits at the centre,
the highest at the edges, as in seed 000 Fig. 3 and Yin et al. 2019; axes are the centred
offsets (i vertical, j horizontal) in cycles per image; the colour scale is ColorBrewer's RdBu
(diverging and colour-blind safe: red is low, blue high) with a labelled colour bar; cells that
were not computed are hatched; dashed circles mark the band edges (``certbench.spectral``).
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib as mpl
import numpy as np
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.patches import Circle
from matplotlib.ticker import MaxNLocator

from certbench.errors import SensitivityError
from certbench.spectral import BAND_EDGES, NYQUIST

DIVERGING_CMAP = "RdBu"
"""ColorBrewer RdBu: diverging, safe for the common colour-vision deficiencies."""
MISSING_HATCH = "////"
"""Cells without records show the hatched background: no colour of the scale can mimic it."""


def heatmap_figure(
    values: np.ndarray,
    frequencies: np.ndarray,
    *,
    title: str,
    label: str,
    vmin: float | None = None,
    vmax: float | None = None,
    center: float | None = None,
    size: int = 32,
) -> Figure:
    """A square heatmap of ``values`` (K, K) on the centred grid ``frequencies`` (K,) of
    ``size``×``size`` images (the band circles scale with its Nyquist frequency ``size/2``).

    Colour limits default to [min(0, data), max(data)] with the diverging centre half-way;
    pass ``center=0`` with symmetric limits for a difference map (:func:`difference_figure`).
    """
    data = np.asarray(values, dtype=np.float64)
    freqs = np.asarray(frequencies)
    if data.shape != (len(freqs), len(freqs)):
        raise SensitivityError(
            f"heatmap values of shape {data.shape} do not match {len(freqs)} frequencies per axis"
        )
    norm = _norm(data, vmin, vmax, center)
    step = float(freqs[1] - freqs[0]) if len(freqs) > 1 else 1.0
    lo, hi = float(freqs[0]) - step / 2, float(freqs[-1]) + step / 2
    fig = Figure(figsize=(4.6, 3.9), layout="constrained")
    ax = fig.add_subplot()
    cmap = mpl.colormaps[DIVERGING_CMAP].with_extremes(bad=(0.0, 0.0, 0.0, 0.0))
    ax.patch.set_facecolor("white")
    ax.patch.set_hatch(MISSING_HATCH)
    ax.patch.set_edgecolor("0.6")
    image = ax.imshow(
        np.ma.masked_invalid(data),
        cmap=cmap,
        norm=norm,
        origin="lower",
        extent=(lo, hi, lo, hi),
        interpolation="nearest",
    )
    scale = (size / 2) / NYQUIST
    for edge in BAND_EDGES:
        ax.add_patch(
            Circle((0, 0), edge * scale, fill=False, linestyle="--", linewidth=0.7, color="0.25")
        )
    ax.set_xlabel("horizontal frequency j (cycles/image)")
    ax.set_ylabel("vertical frequency i (cycles/image)")
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    missing = "\nhatched cells: not computed" if np.isnan(data).any() else ""
    ax.set_title(title + missing, fontsize=9)
    bar = fig.colorbar(image, ax=ax, shrink=0.9)
    bar.set_label(label)
    return fig


def difference_figure(
    first: np.ndarray, second: np.ndarray, frequencies: np.ndarray, *, title: str, label: str
) -> Figure:
    """``first − second`` centred at 0 with symmetric limits (the compare page's map)."""
    diff = np.asarray(first, dtype=np.float64) - np.asarray(second, dtype=np.float64)
    finite = diff[np.isfinite(diff)]
    bound = float(np.abs(finite).max()) if finite.size else 0.0
    bound = bound if bound > 0 else 1e-6
    return heatmap_figure(
        diff, frequencies, title=title, label=label, vmin=-bound, vmax=bound, center=0.0
    )


def figure_svg(fig: Figure) -> str:
    """The figure as a self-contained SVG string (text kept as text, seeded element ids)."""
    buffer = io.StringIO()
    with mpl.rc_context({"svg.fonttype": "none", "svg.hashsalt": "certbench"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def save_figure(fig: Figure, stem: str | Path) -> list[Path]:
    """Write ``stem.png`` and ``stem.svg``; returns both paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    png, svg = stem.with_suffix(".png"), stem.with_suffix(".svg")
    fig.savefig(png, format="png", dpi=150, metadata={"Software": None})
    svg.write_text(figure_svg(fig), encoding="utf-8")
    return [png, svg]


def _norm(
    data: np.ndarray, vmin: float | None, vmax: float | None, center: float | None
) -> TwoSlopeNorm:
    finite = data[np.isfinite(data)]
    data_low = min(0.0, float(finite.min())) if finite.size else 0.0
    data_high = float(finite.max()) if finite.size else 1.0
    low = data_low if vmin is None else float(vmin)
    high = data_high if vmax is None else float(vmax)
    if high <= low:
        high = low + 1e-6
    mid = (low + high) / 2 if center is None else float(center)
    if not low < mid < high:
        raise SensitivityError(
            f"colour centre {mid} must lie strictly between vmin {low} and vmax {high}"
        )
    return TwoSlopeNorm(vcenter=mid, vmin=low, vmax=high)
