"""Fourier sensitivity analysis (Yin et al. 2019; Sun et al. 2022): heatmaps of smoothed
classifiers.

- :mod:`~certbench.fourier.grid`, :mod:`~certbench.fourier.basis`: the frequency grid, basis
  images and perturbations; :mod:`~certbench.fourier.protocol`: what one heatmap costs;
- :mod:`~certbench.fourier.sensitivity`: per-(point, image) records (base and smoothed);
- :mod:`~certbench.fourier.heatmap`: heatmaps and band summaries from records;
  :mod:`~certbench.fourier.records`: their parquet form (figures: ``certbench.figures``);
- :mod:`~certbench.fourier.spectral`: FFT helpers shared with CIFAR-F and FourierMix;
  :mod:`~certbench.fourier.terms`: the stage's per-image figure terms.

Uses the ground floor. Public face: ``__all__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from certbench import public_face

if TYPE_CHECKING:
    from certbench.fourier.basis import basis_image, perturb, perturbation_signs
    from certbench.fourier.heatmap import Heatmap, assemble_heatmap, summarize_heatmap
    from certbench.fourier.protocol import (
        PROTOCOLS,
        SIGN_NAMES,
        SIGN_TEXT,
        ChannelSigns,
        SensitivityProtocol,
        channel_signs_of,
        get_protocol,
        stream_key,
    )
    from certbench.fourier.records import read_sensitivity_records, write_sensitivity_records
    from certbench.fourier.sensitivity import SensitivityRecord, sensitivity_records
    from certbench.fourier.spectral import (
        BANDS,
        frequency_band,
        hermitian_rfft_columns,
        radial_frequency,
        radial_spectrum,
        rfft_frequency,
    )
    from certbench.fourier.terms import SENSITIVITY_BANDS, sensitivity_terms

__getattr__, __dir__, __all__ = public_face(__name__, __file__)
