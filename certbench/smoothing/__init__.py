"""Randomized smoothing (Cohen, Rosenfeld & Kolter 2019): CERTIFY and PREDICT, and what they make.

The ground floor of certbench's science, with ``stats``, ``data`` and ``nets``:

- :mod:`~certbench.smoothing.core`: CERTIFY/PREDICT on a batch of images (``certify``,
  ``predict``);
- :mod:`~certbench.smoothing.outcomes`: their records and statistics (torch-free);
- :mod:`~certbench.smoothing.sampling`: the engine that draws noise and counts classes fast;
- :mod:`~certbench.smoothing.compiled`: its torch.compile'd forward, and the eager fallback
  (recorded: ``compile_fallback``) where torch.compile fails on a model;
- :mod:`~certbench.smoothing.streams`: per-image 64-bit random streams (``derive_seed``);
- :mod:`~certbench.smoothing.records`: per-image records on disk (parquet);
- :mod:`~certbench.smoothing.metrics`: ACR, mACR, certified accuracy and the p_A distribution,
  computed from records only.

Public face: the names in ``__all__``; other packages import them from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from certbench import public_face

if TYPE_CHECKING:
    from certbench.smoothing.compiled import (
        CompileFallbackWarning,
        compile_fallback,
        fallback_metadata,
    )
    from certbench.smoothing.core import certify, predict
    from certbench.smoothing.defaults import engine_choice
    from certbench.smoothing.metrics import (
        PA_GRID,
        PA_QUANTILES,
        RADII,
        Records,
        macr,
        pa_ecdf,
        recompute_at_alpha,
        summarize,
    )
    from certbench.smoothing.outcomes import ABSTAIN, CertifyRecord
    from certbench.smoothing.records import (
        METADATA_KEY,
        SCHEMA,
        read_benchmark_records,
        read_metadata,
        read_records,
        read_table,
        records_to_table,
        table_to_records,
        write_records,
        write_table_atomic,
    )
    from certbench.smoothing.sampling import waves
    from certbench.smoothing.streams import derive_seed, parse_seed, seeded_generator

__getattr__, __dir__, __all__ = public_face(__name__, __file__)
