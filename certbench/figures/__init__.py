"""Figures as declarative Vega-Lite specs: one spec per figure, drawn interactively on the web
pages (the Vega bundle that ``vl-convert`` ships, served by the API, so pages stay offline) and
rendered to SVG, PNG and PDF without a browser by ``vl-convert`` for the CLI and for papers.

Vega-Lite lays out titles, axes and legends itself; nothing here places text by hand.

- :mod:`~certbench.figures.spec`: the figure object, palette, shared configuration;
- :mod:`~certbench.figures.charts`: curves with bands, grouped bars, scatter plots with error
  bars and a fitted line;
- :mod:`~certbench.figures.heatmaps`: labelled grid heatmaps and Fourier frequency maps;
- :mod:`~certbench.figures.difference`: the noise floor of difference maps (which cells of two
  runs' heatmaps differ significantly);
- :mod:`~certbench.figures.panels`: the paper figures the CLI writes (Fourier maps, weather
  example panels, the PD threat scatter);
- :mod:`~certbench.figures.rendering`: SVG / PNG / PDF through ``vl-convert``;
- :mod:`~certbench.figures.tables`, :mod:`~certbench.figures.latex` and
  :mod:`~certbench.figures.references`: the rest of what goes into a paper: CSV and LaTeX
  (booktabs, the papers' layout) tables with intervals, BibTeX;
- :mod:`~certbench.figures.spreadsheet`: CSV cells a spreadsheet never evaluates as formulas
  (every CSV certbench writes, the CLI's exports included).

Sits above the papers' systems (it may read ``pd``, ``fourier``, ``lens``, ``weather``,
``stats``, ``smoothing``) and below ``client`` and ``cli``. Public face: ``__all__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from certbench import public_face

if TYPE_CHECKING:
    from certbench.figures.charts import (
        Axis,
        Bars,
        Curve,
        FitLine,
        ScatterPoint,
        bar_chart,
        compact,
        line_chart,
        linear_axis,
        probit,
        probit_axis,
        scatter_chart,
    )
    from certbench.figures.difference import (
        CellTests,
        cell_outcomes,
        paired_cell_tests,
        unpaired_cell_tests,
    )
    from certbench.figures.heatmaps import frequency_heatmap, grid_heatmap
    from certbench.figures.latex import PACKAGES, latex_text, to_latex
    from certbench.figures.panels import (
        fourier_heatmap_figure,
        threat_figure,
        weather_panel_figure,
        write_weather_panel,
    )
    from certbench.figures.references import (
        PAPERS,
        Reference,
        benchmark_references,
        entry_reference,
        to_bibtex,
    )
    from certbench.figures.rendering import FORMATS, MEDIA_TYPES, javascript_bundle, render, save
    from certbench.figures.spec import OKABE_ITO, Figure
    from certbench.figures.spreadsheet import safe_cell, safe_csv
    from certbench.figures.tables import Cell, Column, Table, read_csv, to_csv

__getattr__, __dir__, __all__ = public_face(__name__, __file__)
