"""Per-unit terms of the Fourier lens stage's figures (``certbench.stats.terms``).

One term per path (HFF, consistent distance) or Jacobian image (‖J‖², the figure being its
root-mean-square) of Fridovich-Keil et al., NeurIPS 2022, on the work units of the benchmark's
public plan, so two entries are paired unit by unit.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from certbench.lens.metrics import METRICS, NYQUIST_METRICS, LensRecord
from certbench.stats import FigureTerms, Kind, figure_terms


def lens_terms(records: Sequence[LensRecord]) -> dict[str, FigureTerms]:
    """Every lens figure of ``certbench.lens.metrics.METRICS`` and ``NYQUIST_METRICS`` the
    records hold: one term per
    work unit (path or Jacobian image), ``rms`` for the Jacobian norm."""
    by_kind: dict[str, list[LensRecord]] = defaultdict(list)
    for r in records:
        by_kind[r.kind].append(r)
    out: dict[str, FigureTerms] = {}
    for name, (kind, attr) in {**METRICS, **NYQUIST_METRICS}.items():
        rows = by_kind.get(kind)
        if rows:
            figure_kind: Kind = "rms" if kind == "jacobian" else "mean"
            out[name] = figure_terms(
                [r.unit for r in rows], [float(getattr(r, attr)) for r in rows], figure_kind
            )
    return out
