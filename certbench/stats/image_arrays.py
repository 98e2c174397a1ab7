"""One test set's certification records as per-image arrays sorted by image index: what every
interval and paired test of :mod:`certbench.stats` resamples (``set_arrays``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from certbench.errors import RecordsError
from certbench.smoothing import ABSTAIN, Records


@dataclass(frozen=True)
class SetArrays:
    """One test set's per-image values, sorted by image index."""

    index: np.ndarray
    correct: np.ndarray
    radius: np.ndarray
    abstain: np.ndarray
    pa_hat: np.ndarray

    @property
    def score(self) -> np.ndarray:
        """radius·1[correct]: the per-image term of ACR."""
        return np.where(self.correct, self.radius, 0.0)

    def certified(self, radius: float) -> np.ndarray:
        """1[correct ∧ radius ≥ r]: the per-image term of certified accuracy at r."""
        return (self.correct & (self.radius >= radius)).astype(np.float64)


def set_arrays(records: Records) -> SetArrays:
    """Per-image arrays of one test set's records (a table or CertifyRecord objects).

    Raises RecordsError for no records, a missing column or a repeated image index.
    """
    names = ("index", "correct", "radius", "prediction", "n_y", "n")
    if isinstance(records, pa.Table):
        missing = [n for n in names if n not in records.column_names]
        if missing:
            raise RecordsError(f"records are missing columns {missing} needed for intervals")
        c = {n: records.column(n).to_numpy(zero_copy_only=False) for n in names}
    else:
        c = {n: np.array([getattr(r, n) for r in records]) for n in names}
    if len(c["index"]) == 0:
        raise RecordsError("no records: intervals need at least one certified image")
    order = np.argsort(c["index"], kind="stable")
    index = c["index"][order].astype(np.int64)
    if len(np.unique(index)) != len(index):
        raise RecordsError("records repeat an image index; merge shards without overlap first")
    return SetArrays(
        index=index,
        correct=c["correct"][order].astype(bool),
        radius=c["radius"][order].astype(np.float64),
        abstain=c["prediction"][order] == ABSTAIN,
        pa_hat=c["n_y"][order] / np.maximum(c["n"][order], 1),
    )
