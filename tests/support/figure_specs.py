"""Read the figures of a page: each is a Vega-Lite spec in a ``<script type="application/json"
id="NAME-spec">`` block beside the ``<div class="vega-chart" id="NAME">`` vega-embed draws."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any

_BLOCK = re.compile(r'<script type="application/json" id="([^"]+)-spec">(.*?)</script>', re.S)


def specs(html: str) -> dict[str, dict[str, Any]]:
    """Every figure's spec on the page, by figure name."""
    return {name: json.loads(body) for name, body in _BLOCK.findall(html)}


def rows(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The spec's inline data rows."""
    return list(spec["data"]["values"])


def curves(spec: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """A line chart's rows by curve label, in drawing (legend) order."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows(spec):
        out[row["series"]].append(row)
    return dict(out)


def texts(spec: Any) -> list[str]:
    """Every string in a spec (titles, axis titles, labels, data), for wording checks."""
    if isinstance(spec, str):
        return [spec]
    if isinstance(spec, dict):
        return [t for v in spec.values() for t in texts(v)]
    if isinstance(spec, list):
        return [t for v in spec for t in texts(v)]
    return []
