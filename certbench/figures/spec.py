"""What every figure shares: the :class:`Figure` object, the colour-blind palette, the Vega-Lite
configuration (fonts, legend and title placement) and helpers for titles and number formats.

A figure is a Vega-Lite v6 spec (a JSON-able dict). The same dict is embedded in the web page
(``vegaEmbed``) and rendered by ``vl-convert`` (:mod:`certbench.figures.rendering`), so the page,
the downloads and the CLI's files always show the same figure.
"""

from __future__ import annotations

import textwrap
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
            "labelLimit": 240,
            "symbolStrokeWidth": 2.5,
            "columnPadding": 16,
        },
    }


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
