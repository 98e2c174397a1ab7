"""One test set's certification records as per-image arrays sorted by image index: what every
interval and paired test of :mod:`certbench.stats` resamples (``set_arrays``).

Each figure reads only the columns it is defined on, so records written by other tools (a table
of ``index``, ``correct``, ``radius``, ``n_y``, ``n``) give every interval those columns define:
certified accuracy and ACR need ``correct`` and ``radius``; the p_A curve (Sun et al., ICML 2025)
``correct``, ``n_y`` and ``n``; only the abstain rate needs ``prediction``. A figure whose column
is missing raises :class:`~certbench.errors.RecordsError` naming it, when it is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from certbench.errors import RecordsError
from certbench.smoothing import ABSTAIN, Records

#: Columns every figure needs: the image index (sorting, pairing two entries' images).
REQUIRED = ("index",)
#: Columns read when present: each figure's own (see :data:`SOURCES`).
OPTIONAL = ("correct", "radius", "prediction", "n_y", "n")
#: Per-image array → the record columns it is computed from.
SOURCES = {
    "correct": ("correct",),
    "radius": ("radius",),
    "abstain": ("prediction",),
    "pa_hat": ("n_y", "n"),
}


@dataclass(frozen=True)
class SetArrays:
    """One test set's per-image values, sorted by image index; None where the records lack the
    column a value is computed from (:meth:`need` names it)."""

    index: np.ndarray
    correct: np.ndarray | None = None
    radius: np.ndarray | None = None
    abstain: np.ndarray | None = None
    pa_hat: np.ndarray | None = None

    def need(self, name: str, figure: str) -> np.ndarray:
        """The per-image array ``name`` ("correct", "radius", "abstain", "pa_hat"), or a
        RecordsError naming the record columns ``figure`` needs."""
        value = getattr(self, name)
        if value is None:
            columns = list(SOURCES[name])
            raise RecordsError(f"records are missing columns {columns} needed for {figure}")
        return np.asarray(value)

    @property
    def score(self) -> np.ndarray:
        """radius·1[correct]: the per-image term of ACR."""
        correct, radius = self.need("correct", "ACR"), self.need("radius", "ACR")
        return np.where(correct, radius, 0.0)

    def certified(self, radius: float) -> np.ndarray:
        """1[correct ∧ radius ≥ r]: the per-image term of certified accuracy at r."""
        figure = "certified accuracy"
        correct, radii = self.need("correct", figure), self.need("radius", figure)
        return (correct & (radii >= radius)).astype(np.float64)


def _columns(records: Records) -> dict[str, np.ndarray]:
    """The columns of :data:`REQUIRED` and those of :data:`OPTIONAL` the records hold."""
    if isinstance(records, pa.Table):
        missing = [n for n in REQUIRED if n not in records.column_names]
        if missing:
            raise RecordsError(f"records are missing columns {missing} needed for intervals")
        names = [*REQUIRED, *(n for n in OPTIONAL if n in records.column_names)]
        return {n: records.column(n).to_numpy(zero_copy_only=False) for n in names}
    return {n: np.array([getattr(r, n) for r in records]) for n in (*REQUIRED, *OPTIONAL)}


def set_arrays(records: Records) -> SetArrays:
    """Per-image arrays of one test set's records (a table or CertifyRecord objects).

    Raises RecordsError for no records, no ``index`` column or a repeated image index; a
    figure's own columns are checked when it is computed (:meth:`SetArrays.need`).
    """
    c = _columns(records)
    if len(c["index"]) == 0:
        raise RecordsError("no records: intervals need at least one certified image")
    order = np.argsort(c["index"], kind="stable")
    index = c["index"][order].astype(np.int64)
    if len(np.unique(index)) != len(index):
        raise RecordsError("records repeat an image index; merge shards without overlap first")

    def sorted_column(name: str, dtype: type) -> np.ndarray | None:
        return c[name][order].astype(dtype) if name in c else None

    has_counts = "n_y" in c and "n" in c
    return SetArrays(
        index=index,
        correct=sorted_column("correct", bool),
        radius=sorted_column("radius", np.float64),
        abstain=c["prediction"][order] == ABSTAIN if "prediction" in c else None,
        pa_hat=c["n_y"][order] / np.maximum(c["n"][order], 1) if has_counts else None,
    )
