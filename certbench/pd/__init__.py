"""The Projected Displacement threat model (Muthukumar et al. 2025) and robust accuracy under it.

- :mod:`~certbench.pd.anchors`: anchor banks (greedy farthest-first, Algorithm 1);
- :mod:`~certbench.pd.threat`: d_PD and PD-W (``PDThreat``), the k_min rule;
- :mod:`~certbench.pd.lazy_projection`, :mod:`~certbench.pd.exact_projection`: projections onto
  its sublevel sets; :mod:`~certbench.pd.apgd`: APGD (Croce & Hein 2020) with either;
- :mod:`~certbench.pd.evaluation`: the clean, ℓ∞ and ℓ∞ ∩ PD robust-accuracy protocol;
- :mod:`~certbench.pd.report`: the threat of corruption sets; :mod:`~certbench.pd.terms`: the
  stage's per-image figure terms.

Uses the ground floor (smoothing, stats, data, nets). Public face: ``__all__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from certbench import public_face

if TYPE_CHECKING:
    from certbench.pd.anchors import AnchorBank, bank_from_image_set, build_anchor_bank
    from certbench.pd.apgd import LinfPDProjection
    from certbench.pd.evaluation import RobustnessReport, robust_accuracy
    from certbench.pd.report import (
        LINF_THRESHOLD,
        PD_THRESHOLD,
        threat_points,
        threat_report,
        write_threat_report,
    )
    from certbench.pd.terms import robustness_terms
    from certbench.pd.threat import PDThreat, find_k_min, weighted_threat

__getattr__, __dir__, __all__ = public_face(__name__, __file__)
