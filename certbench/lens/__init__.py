"""The Fourier lens (Fridovich-Keil et al. 2022): HFF, consistent distance, Jacobians, effective
robustness.

- :mod:`~certbench.lens.interpolation`: Fourier amplitude/phase and pixel-space image paths;
- :mod:`~certbench.lens.lens`: per-path and per-image records of a model (``lens_records``),
  every figure taken in pixel space [0, 1]; :mod:`~certbench.lens.jacobian`: the Jacobian norm
  and its conversion to a normalised space;
- :mod:`~certbench.lens.metrics`: HFF and CD of one path, summaries, parquet;
- :mod:`~certbench.lens.effective`: effective robustness across entries and which
  metric explains OOD accuracy (pooled); :mod:`~certbench.lens.predictors`: the predictor fits
  per architecture, averaged as the paper's tables; :mod:`~certbench.lens.terms`: per-unit
  figure terms.

Uses the ground floor. Public face: ``__all__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from certbench import public_face

if TYPE_CHECKING:
    from certbench.lens.effective import (
        ID_ACCURACY,
        Accuracy,
        Entry,
        ERValue,
        LinearFit,
        PredictorFit,
        effective_robustness,
        entries_from_json,
        group_by_sigma,
        metric_predictors,
        ood_sets,
    )
    from certbench.lens.fit import fit_to_test_set
    from certbench.lens.jacobian import JACOBIAN_UNIT, normalised_jacobian_norm
    from certbench.lens.lens import LensProtocol, lens_plan, lens_records
    from certbench.lens.metrics import (
        HFF_CONVENTION,
        KINDS,
        METRICS,
        NYQUIST_METRICS,
        LensRecord,
        read_lens_metadata,
        read_lens_records,
        summarize,
        write_lens_records,
    )
    from certbench.lens.predictors import (
        ArchitectureFit,
        architectures,
        per_architecture_predictors,
    )
    from certbench.lens.terms import lens_terms

__getattr__, __dir__, __all__ = public_face(__name__, __file__)
