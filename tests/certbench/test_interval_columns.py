"""Each interval reads only the record columns its figure is defined on (issue 35 §8): a table of
``index``, ``correct``, ``radius``, ``n_y``, ``n`` (no ``prediction``, which only the abstain rate
needs) gives certified accuracy, ACR, mACR, the p_A band and the paired tests, each equal to the
same figure computed from full records; a figure whose column is missing names it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from certbench.errors import RecordsError
from certbench.smoothing import ABSTAIN, CertifyRecord, records_to_table
from certbench.stats import (
    acr_interval,
    certified_accuracy_intervals,
    compare_acr,
    compare_certified_accuracy,
    figure_intervals,
    image_terms,
    pa_band,
)
from certbench.stats.intervals import macr_interval, mean_certified_accuracy_intervals

COLUMNS = ["index", "correct", "radius", "n_y", "n"]


def full_records(seed: int, images: int = 40) -> list[CertifyRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(images):
        correct = bool(rng.random() < 0.7)
        n_y = int(rng.integers(0, 1001))
        out.append(
            CertifyRecord(
                index=i, label=1, prediction=1 if correct else ABSTAIN,
                radius=float(rng.uniform(0, 1)) if correct else 0.0, pa_lower=0.6, selected=1,
                n_a=n_y, n_y=n_y, n=1000, n0=100, correct=correct, seconds=0.0, sigma=0.25,
                alpha=0.001,
            )
        )  # fmt: skip
    return out


def five_columns(records: list[CertifyRecord]) -> pa.Table:
    return records_to_table(records).select(COLUMNS)


def test_intervals_need_no_prediction_column():
    a, b = full_records(0), full_records(1)
    ta, tb = five_columns(a), five_columns(b)
    assert "prediction" not in ta.column_names
    assert acr_interval(ta) == acr_interval(a)
    assert certified_accuracy_intervals(ta) == certified_accuracy_intervals(a)
    assert pa_band(ta).half_width == pa_band(a).half_width
    np.testing.assert_array_equal(pa_band(ta).curve, pa_band(a).curve)
    assert macr_interval({"x": ta, "y": tb}) == macr_interval({"x": a, "y": b})
    assert mean_certified_accuracy_intervals({"x": ta}) == mean_certified_accuracy_intervals(
        {"x": a}
    )
    assert compare_acr(ta, tb) == compare_acr(a, b)
    assert compare_certified_accuracy(ta, tb, 0.25) == compare_certified_accuracy(a, b, 0.25)


def test_a_figure_whose_column_is_missing_names_it():
    table = five_columns(full_records(2))
    with pytest.raises(RecordsError, match=r"\['prediction'\] needed for the abstain rate"):
        figure_intervals({"x": table})
    with pytest.raises(RecordsError, match=r"\['prediction'\] needed for the abstain rate"):
        image_terms({"x": table})
    with pytest.raises(RecordsError, match=r"\['n_y', 'n'\] needed for the p_A curve"):
        pa_band(table.drop(["n_y"]))
    with pytest.raises(RecordsError, match=r"\['radius'\] needed for ACR"):
        acr_interval(table.drop(["radius"]))
    with pytest.raises(RecordsError, match=r"\['index'\] needed for intervals"):
        acr_interval(table.drop(["index"]))
