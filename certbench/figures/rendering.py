"""Figures to files without a browser: ``vl-convert`` runs Vega-Lite and Vega (the same
JavaScript the pages load) in an embedded engine and writes SVG, PNG or PDF.

Text is laid out with the fonts found on the machine (DejaVu on Debian); PNGs are rendered at
``PNG_SCALE`` × for print.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

FORMATS = ("svg", "png", "pdf")
MEDIA_TYPES = {"svg": "image/svg+xml", "png": "image/png", "pdf": "application/pdf"}
PNG_SCALE = 2.0
VEGA_LITE_VERSION = "6.4"
"""The Vega-Lite release the specs are written for (the pages load the same bundle)."""


def render(spec: dict[str, Any], fmt: str) -> bytes:
    """The figure as SVG, PNG or PDF bytes. Raises ValueError for another format."""
    import vl_convert

    if fmt == "svg":
        return vl_convert.vegalite_to_svg(spec, vl_version=VEGA_LITE_VERSION).encode("utf-8")
    if fmt == "png":
        return vl_convert.vegalite_to_png(spec, vl_version=VEGA_LITE_VERSION, scale=PNG_SCALE)
    if fmt == "pdf":
        return vl_convert.vegalite_to_pdf(spec, vl_version=VEGA_LITE_VERSION)
    raise ValueError(f"figure format {fmt!r} is not one of {FORMATS}")


def save(
    spec: dict[str, Any], stem: str | Path, formats: Iterable[str] = ("png", "svg")
) -> list[Path]:
    """Write ``stem.<fmt>`` for each format, each atomically (a reader never sees half a file);
    returns the paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in formats:
        target = stem.with_name(f"{stem.name}.{fmt}")
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(render(spec, fmt))
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        written.append(target)
    return written


def javascript_bundle() -> str:
    """Vega, Vega-Lite and vega-embed as one script that defines ``window.vegaEmbed`` (what the
    pages load from the API; no CDN)."""
    import vl_convert

    # vl_convert's stub marks ``snippet`` required; the binding defaults it to None, the
    # snippet that puts vegaEmbed, vegaLite and vega on ``window`` (what the pages need)
    return vl_convert.javascript_bundle(vl_version=VEGA_LITE_VERSION)  # type: ignore[call-arg]
