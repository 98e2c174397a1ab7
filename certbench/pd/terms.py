"""Per-image terms of the robustness stage's figures (``certbench.stats.terms``).

Clean accuracy of the base classifier and its ℓ∞ and ℓ∞ ∩ PD robust accuracies per ε (Muthukumar
et al. 2025, arXiv:2501.18098): 0/1 per image, named like ``RobustnessReport.summary`` so the mean
of every figure's terms IS the summary's figure (the tests check equality on real records).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from certbench.errors import RecordsError
from certbench.stats import FigureTerms, figure_terms


def robustness_terms(table: pa.Table) -> dict[str, FigureTerms]:
    """``clean_accuracy`` (on the smallest ε's records, as the report's summary) and
    ``linf_robust_accuracy_<tag>``/``pd_robust_accuracy_<tag>`` per ε (tag = ε·255)."""
    names = ("index", "eps", "clean_correct", "linf_robust", "pd_robust")
    missing = [n for n in names if n not in table.column_names]
    if missing:
        raise RecordsError(f"robustness records lack columns {missing}")
    c = {n: table.column(n).to_numpy(zero_copy_only=False) for n in names}
    eps_list = np.unique(c["eps"])
    if len(eps_list) == 0:
        raise RecordsError("no robustness records: attack at least one image")
    out: dict[str, FigureTerms] = {}
    for k, eps in enumerate(eps_list):
        chosen = c["eps"] == eps
        index = c["index"][chosen]
        if k == 0:
            out["clean_accuracy"] = figure_terms(index, c["clean_correct"][chosen], "proportion")
        tag = f"{round(float(eps) * 255):d}"
        for field, name in (("linf_robust", "linf"), ("pd_robust", "pd")):
            out[f"{name}_robust_accuracy_{tag}"] = figure_terms(
                index, c[field][chosen], "proportion"
            )
    return out
