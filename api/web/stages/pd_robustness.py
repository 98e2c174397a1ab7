"""Web section of the PD robustness stage (Muthukumar et al. 2025, arXiv:2501.18098) on the model
page: the ε table and a hatched bar chart of the base classifier's clean, ℓ∞ and ℓ∞ ∩ PD accuracy.

A stage's web section is a module here (``STAGE``, ``TEMPLATE`` and ``context``) plus its template
partial in ``templates/stages/``; ``api.web.stages`` finds every such module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from api.schemas.result import ResultsPublic, RobustnessPublic
from certbench.figures import Axis, Bars, Figure, bar_chart

STAGE = "pd_robustness"
TEMPLATE = "stages/pd_robustness.html"


def context(results: ResultsPublic) -> dict[str, Any]:
    """What the partial reads besides ``results``, ``benchmark`` and ``active``."""
    if results.robustness is None:
        return {}
    return {
        "robustness_rows": robustness_rows(results.robustness),
        "robustness_chart": robustness_chart(results.robustness),
    }


@dataclass(frozen=True)
class RobustnessRow:
    """One ε (units of 1/255) of a robustness result: ℓ∞, ℓ∞ ∩ PD (the worse of both PD
    attacks), each PD attack alone, and the median d_PD of the ℓ∞ adversarial examples."""

    eps: int
    linf: float | None
    pd: float | None
    projected: float | None
    aware: float | None
    threat_median: float | None


def robustness_eps(robustness: RobustnessPublic) -> list[int]:
    """The radii attacked, from the protocol (else from the figures' ε tags), ascending."""
    eps = robustness.protocol.get("eps")
    if eps:
        return sorted(int(e) for e in eps)
    prefix = "linf_robust_accuracy_"
    return sorted(int(k[len(prefix) :]) for k in robustness.figures if k.startswith(prefix))


def robustness_rows(robustness: RobustnessPublic) -> list[RobustnessRow]:
    figures = robustness.figures
    return [
        RobustnessRow(
            eps=eps,
            linf=figures.get(f"linf_robust_accuracy_{eps}"),
            pd=figures.get(f"pd_robust_accuracy_{eps}"),
            projected=figures.get(f"pd_projected_accuracy_{eps}"),
            aware=figures.get(f"pd_aware_accuracy_{eps}"),
            threat_median=figures.get(f"linf_pd_threat_median_{eps}"),
        )
        for eps in robustness_eps(robustness)
    ]


def robustness_chart(robustness: RobustnessPublic, *, chart_id: str = "robustness-bars") -> Figure:
    """Clean vs ℓ∞ vs ℓ∞ ∩ PD accuracy of the base classifier, one group of bars per ε."""
    rows = robustness_rows(robustness)
    groups = [f"ε = {row.eps}/255" for row in rows]
    series = [
        Bars("clean", [robustness.base_accuracy] * len(rows)),
        Bars("ℓ∞ (APGD)", [row.linf for row in rows]),
        Bars("ℓ∞ ∩ PD (Muthukumar et al. 2025)", [row.pd for row in rows]),
    ]
    values = "; ".join(
        f"ε = {row.eps}/255: ℓ∞ {_pct(row.linf)}, ℓ∞ ∩ PD {_pct(row.pd)}" for row in rows
    )
    description = (
        f"Accuracy of the base classifier (not smoothed) on {robustness.count} clean images: "
        f"clean {_pct(robustness.base_accuracy)}; {values}."
    )
    spec = bar_chart(
        groups,
        series,
        title="Base classifier: clean vs ℓ∞ vs ℓ∞ ∩ PD accuracy",
        description=description,
        x_label="ℓ∞ radius ε (units of 1/255)",
        y=Axis("accuracy (base classifier)", 0.0, 1.0, percent=True),
    )
    return Figure(chart_id, spec, description)


def _pct(value: float | None) -> str:
    return "not measured" if value is None else f"{value * 100:.1f}%"
