"""Uncertainty of every leaderboard figure: intervals, per-image terms and paired tests.

- :mod:`~certbench.stats.intervals`: Clopper-Pearson and bootstrap intervals of the
  certification figures, paired tests of two entries (McNemar, paired bootstrap);
- :mod:`~certbench.stats.terms`: any figure that is a mean of per-unit terms (the other
  stages' figures), its 95 % interval and paired tests;
- :mod:`~certbench.stats.entry_intervals`: intervals on every certification figure of an entry
  from compact per-image terms.

Built on ``certbench.smoothing`` (records, metrics). Public face: ``__all__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from certbench import public_face

if TYPE_CHECKING:
    from certbench.stats.entry_intervals import (
        FigureIntervals,
        ImageTerms,
        compare_terms,
        figure_intervals,
        image_terms,
        mean_pa_band,
    )
    from certbench.stats.image_arrays import SetArrays, set_arrays
    from certbench.stats.intervals import (
        LEVEL,
        PairedTest,
        acr_interval,
        benchmark_replicates,
        bootstrap_means,
        certified_accuracy_intervals,
        clopper_pearson,
        compare_acr,
        compare_certified_accuracy,
        mcnemar,
        pa_band,
        percentile_bounds,
    )
    from certbench.stats.terms import (
        FigureTerms,
        Kind,
        compare_figure,
        figure_interval,
        figure_terms,
        mean_over_sets,
        terms_from_table,
        terms_table,
    )

__getattr__, __dir__, __all__ = public_face(__name__, __file__)
