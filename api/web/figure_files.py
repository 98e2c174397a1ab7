"""Figures of the pages as files and the charting script the pages load.

- ``/assets/vega-<version>.js``: Vega, Vega-Lite and vega-embed in one script, taken from the
  ``vl-convert`` package, so pages draw their figures offline. Building it costs about 1.3 s of
  CPU, so it is built on its first request, not at start-up (most API processes of a fleet never
  serve it), and kept in ``<data_dir>/cache/`` for the deployment's other and later processes;
  browsers cache it for good;
- ``figure_response``: one of a page's figures as SVG, PNG or PDF, rendered by ``vl-convert``
  from the very spec the page embeds (the download links under every figure, and the picture a
  browser without JavaScript shows).

Pages collect their figures with :func:`collect`: every ``certbench.figures.Figure`` found in
the page's context, by name.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import logging
import threading
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi import Path as PathParameter
from fastapi.responses import Response
from markupsafe import Markup

from certbench.figures import MEDIA_TYPES, Figure, javascript_bundle, render
from models.core.errors import NotFoundError
from models.submissions.storage import write_atomic

logger = logging.getLogger(__name__)
router = APIRouter(include_in_schema=False)
#: The path parameters of every page's figure route (``.../figures/{name}.{fmt}``).
FigureName = Annotated[
    str, PathParameter(max_length=80, description="the figure's name on its page")
]
FigureFormat = Annotated[
    str, PathParameter(pattern="^(svg|png|pdf)$", description="svg, png or pdf")
]
BUNDLE_VERSION = "vl6.4-1"
BUNDLE_URL = f"/assets/vega-{BUNDLE_VERSION}.js"


_bundles: dict[Path, bytes] = {}
_bundles_lock = threading.Lock()


def bundle_file(data_dir: Path) -> Path:
    """Where a deployment keeps the built script: named by the bundle's version and the
    ``vl-convert`` release that built it, so an upgrade builds it again."""
    release = importlib.metadata.version("vl-convert-python")
    return data_dir / "cache" / f"vega-{BUNDLE_VERSION}-vl-convert-{release}.js"


def bundle(data_dir: Path) -> bytes:
    """The script, read from the deployment's cache or built (once per process; a lock keeps
    concurrent first requests from building it twice)."""
    path = bundle_file(data_dir)
    with _bundles_lock:
        if path not in _bundles:
            _bundles[path] = _read_or_build(path)
        return _bundles[path]


def _read_or_build(path: Path) -> bytes:
    if path.is_file():
        return path.read_bytes()
    body = javascript_bundle().encode("utf-8")
    try:
        write_atomic(path, body)  # a process reading it never sees half a file
    except OSError as err:  # a read-only or full data directory: served all the same
        logger.warning(
            "the Vega bundle is not kept in %s (%s): each API process builds it again",
            path.parent,
            err.strerror or err,
        )
    return body


@router.get(BUNDLE_URL, name="vega_bundle")
def vega_bundle(request: Request) -> Response:
    return Response(
        bundle(request.app.state.settings.data_dir),
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
