"""What every figure shares: the :class:`Figure` object, the colour-blind palette, the Vega-Lite
configuration (fonts, legend and title placement) and helpers for titles and number formats.

A figure is a Vega-Lite v6 spec (a JSON-able dict). The same dict is embedded in the web page
(``vegaEmbed``) and rendered by ``vl-convert`` (:mod:`certbench.figures.rendering`), so the page,
the downloads and the CLI's files always show the same figure.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json"
#: Okabe & Ito (2008), ordered so the first colours contrast best on white; yellow last.
OKABE_ITO = (
    "#0072B2",  # blue
    "#D55E00",  # vermillion
    "#009E73",  # bluish green
    "#CC79A7",  # reddish purple
    "#E69F00",  # orange
    "#56B4E9",  # sky blue
    "#000000",  # black
    "#F0E442",  # yellow
)
#: Dash patterns paired with the colours, so curves differ in greyscale print too.
DASHES = ([1, 0], [7, 3], [2, 3], [9, 3, 2, 3], [4, 2], [1, 2], [12, 4], [5, 2, 1, 2])
FONT = "DejaVu Sans, Verdana, sans-serif"
#: Titles wrap at word boundaries after this many characters (never cut mid-word).
TITLE_CHARACTERS = 64
WIDTH, HEIGHT = 520, 280
LEGEND_CHAR_PX = 7.0
"""The advance of an average character of an 11 px DejaVu Sans legend label, rounded up."""
LEGEND_SYMBOL_PX = 40.0
"""A legend entry's symbol and the gap before its label."""
LEGEND_COLUMN_GAP = 16


@dataclass(frozen=True)
class Figure:
    """One figure: ``name`` (a DOM id and a file stem), its Vega-Lite ``spec`` and a sentence
    ``description`` for screen readers and the figure's ``<desc>`` / alt text."""

    name: str
    spec: dict[str, Any]
    description: str = ""


def wrap_title(text: str, width: int = TITLE_CHARACTERS) -> str | list[str]:
    """A title as one line, or several lines broken at spaces (Vega draws a list as lines)."""
    lines = textwrap.wrap(text, width=width, break_long_words=False, break_on_hyphens=False)
    return lines[0] if len(lines) == 1 else lines


def title(text: str, subtitle: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"text": wrap_title(text), "anchor": "start"}
    if subtitle:
        out["subtitle"] = wrap_title(subtitle, TITLE_CHARACTERS + 16)
    return out


def config() -> dict[str, Any]:
    """Fonts and sizes shared by every figure; legends below the plot in columns, so long labels
    never run into each other or into the plot."""
    return {
        "font": FONT,
        "view": {"stroke": "#444"},
        "title": {"fontSize": 14, "fontWeight": 600, "subtitleFontSize": 11, "offset": 8},
        "axis": {"labelFontSize": 11, "titleFontSize": 12, "gridColor": "#e3e3e3"},
        "legend": {
            "orient": "bottom",
            "direction": "vertical",
            "columns": 2,
            "labelFontSize": 11,
            "titleFontSize": 11,
            "labelLimit": 0,  # never cut a label (legend() wraps long ones)
            "symbolStrokeWidth": 2.5,
            "columnPadding": LEGEND_COLUMN_GAP,
        },
    }


def legend(labels: Sequence[str], width: int) -> dict[str, Any]:
    """Legend properties for ``labels`` under a plot ``width`` px wide: every label in full
    (Vega cuts a label at ``labelLimit`` with an ellipsis, and two long model names then read
    alike: issue 34 §4), in two columns when every label fits half the width on one line, else
    in one, a longer label wrapped at spaces into lines that fit (``labelExpr`` draws a list of
    strings as lines)."""
    half = int(((width - LEGEND_COLUMN_GAP) / 2 - LEGEND_SYMBOL_PX) // LEGEND_CHAR_PX)
    longest = max((len(label) for label in labels), default=0)
    columns = 2 if longest <= half else 1
    per_line = half if columns == 2 else int((width - LEGEND_SYMBOL_PX) // LEGEND_CHAR_PX)
    lines = {label: wrap_title(label, max(per_line, 12)) for label in labels}
    wrapped = {label: text for label, text in lines.items() if isinstance(text, list)}
    out: dict[str, Any] = {"columns": columns, "labelLimit": 0}
    if wrapped:
        table = json.dumps(wrapped, ensure_ascii=False)
        out["labelExpr"] = f"({table})[datum.label] || datum.label"
    return out


def base(name_title: str, *, description: str, subtitle: str = "") -> dict[str, Any]:
    """The top of every spec: schema, title, description, padding, configuration."""
    return {
        "$schema": SCHEMA,
        "title": title(name_title, subtitle),
        "description": description or name_title,
        "padding": 6,
        "background": "white",
        "config": config(),
    }


def percent_format(percent: bool) -> str:
    return ".0%" if percent else "~g"


def tooltip_format(percent: bool) -> str:
    return ".1%" if percent else ".3f"
