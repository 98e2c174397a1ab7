"""Figures of the pages as files and the charting script the pages load.

- ``/assets/vega-<version>.js``: Vega, Vega-Lite and vega-embed in one script, taken from the
  ``vl-convert`` package (built once per process, cached by the browser for good), so pages draw
  their figures offline;
- ``figure_response``: one of a page's figures as SVG, PNG or PDF, rendered by ``vl-convert``
  from the very spec the page embeds (the download links under every figure, and the picture a
  browser without JavaScript shows).

Pages collect their figures with :func:`collect`: every ``certbench.figures.Figure`` found in
the page's context, by name.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from functools import lru_cache
from typing import Annotated, Any

from fastapi import APIRouter, Path
from fastapi.responses import Response
from markupsafe import Markup

from certbench.figures import MEDIA_TYPES, Figure, javascript_bundle, render
from models.core.errors import NotFoundError

router = APIRouter(include_in_schema=False)
#: The path parameters of every page's figure route (``.../figures/{name}.{fmt}``).
FigureName = Annotated[str, Path(max_length=80, description="the figure's name on its page")]
FigureFormat = Annotated[str, Path(pattern="^(svg|png|pdf)$", description="svg, png or pdf")]
BUNDLE_VERSION = "vl6.4-1"
BUNDLE_URL = f"/assets/vega-{BUNDLE_VERSION}.js"


@lru_cache(maxsize=1)
def _bundle() -> bytes:
    return javascript_bundle().encode("utf-8")


def warm_bundle() -> None:
    """Build the bundle in the background at start-up (it takes seconds), so the first page
    with figures does not wait for it."""
    threading.Thread(target=_bundle, name="vega-bundle", daemon=True).start()


@router.get(BUNDLE_URL, name="vega_bundle")
def vega_bundle() -> Response:
    return Response(
        _bundle(),
        media_type="text/javascript",
        headers={"Cache-Control": "public, max-age=31536000, immutable"},
    )


def _walk(value: Any) -> Iterator[Figure]:
    if isinstance(value, Figure):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _walk(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _walk(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _walk(getattr(value, f.name))


def collect(context: Any) -> dict[str, Figure]:
    """Every figure of a page's context, by name."""
    return {figure.name: figure for figure in _walk(context)}


@lru_cache(maxsize=256)
def _rendered(spec: str, fmt: str) -> bytes:
    return render(json.loads(spec), fmt)


def figure_response(figures: dict[str, Figure], name: str, fmt: str) -> Response:
    """One figure as a file (``fmt``: svg, png or pdf). Raises NotFoundError for a name the
    page does not have or another format."""
    if fmt not in MEDIA_TYPES:
        raise NotFoundError(f"figure format {fmt!r} is not one of {sorted(MEDIA_TYPES)}")
    if name not in figures:
        raise NotFoundError(f"this page has no figure {name!r}; it has {sorted(figures)}")
    body = _rendered(json.dumps(figures[name].spec, sort_keys=True), fmt)
    return Response(
        body,
        media_type=MEDIA_TYPES[fmt],
        headers={
            "Content-Disposition": f'inline; filename="{name}.{fmt}"',
            "Cache-Control": "private, max-age=600",
            "X-Content-Type-Options": "nosniff",
            # an SVG opened on its own must not run anything
            "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
        },
    )


def spec_json(figure: Figure) -> Markup:
    """The spec for a ``<script type="application/json">`` block (``<`` escaped, so no text in
    the data can close the element)."""
    text = json.dumps(figure.spec, ensure_ascii=False, separators=(",", ":"))
    return Markup(text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))
