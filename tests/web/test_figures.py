"""Figure data: the fast certified-accuracy grid equals certbench.smoothing.metrics; CIFAR-F grids
and band tables aggregate the per-test-set results correctly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from api.schemas.result import ResultsPublic, TestSetResultPublic
from api.web.figures import (
    RADIUS_GRID,
    SetCurves,
    certified_accuracy_chart,
    certified_on_grid,
    corruption_rows,
    fourier_grid,
    is_fourier,
)
from certbench.errors import RecordsError
from certbench.smoothing.metrics import certified_accuracy


def _table(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    radius = np.round(rng.uniform(0, 1.2, n), 3)  # many radii fall exactly on grid points
    correct = rng.random(n) < 0.6
    return pa.table(
        {
            "prediction": np.where(correct, 1, -1),
            "label": np.ones(n, dtype=np.int64),
            "radius": np.where(correct, radius, 0.0),
            "correct": correct,
            "n_y": rng.integers(0, 1000, n),
            "n": np.full(n, 1000),
            "seconds": np.zeros(n),
        }
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_certified_grid_equals_the_library_definition(seed: int) -> None:
    table = _table(300, seed)
    expected = certified_accuracy(table, RADIUS_GRID)
    assert np.array_equal(certified_on_grid(table), [expected[float(r)] for r in RADIUS_GRID])


def test_certified_grid_refuses_empty_records() -> None:
    with pytest.raises(RecordsError, match="no records"):
        certified_on_grid(_table(0, 0))


def _result(name: str, acr: float, **attributes: object) -> TestSetResultPublic:
    band = attributes.pop("band", None)
    return TestSetResultPublic(
        test_set=name,
        band=band,
        attributes=attributes,
        acr=acr,
        certified_accuracy={"0": 0.9, "0.25": 0.7, "0.5": 0.5, "0.75": 0.3, "1": 0.1},
        clean_accuracy=0.9,
        abstain_rate=0.05,
        pa_median=0.8,
        pa_quantiles={},
        count=10,
        seconds=1.0,
        protocol_version="v",
        evaluator_version="e",
        records_url="/x",
    )


def test_fourier_grid_means_over_severities_and_marks_missing() -> None:
    results = [
        _result("a", 0.2, f_c=1, alpha=0.5, severity=1),
        _result("b", 0.4, f_c=1, alpha=0.5, severity=2),
        _result("c", 0.6, f_c=2, alpha=0.5, severity=1),
        _result("d", 0.8, f_c=1, alpha=2.0, severity=1),
    ]
    assert is_fourier(results)
    alphas, fcs, grid = fourier_grid(results)
    assert alphas == [0.5, 2.0] and fcs == [1, 2]
    assert grid[0, 0] == pytest.approx(0.3) and grid[0, 1] == pytest.approx(0.6)
    assert grid[1, 0] == pytest.approx(0.8) and np.isnan(grid[1, 1])
    assert not is_fourier([_result("clean", 0.5)])


def test_corruption_rows_group_severities_and_order_bands() -> None:
    rows = corruption_rows(
        [
            _result("noise_s1", 0.1, corruption="noise", band="high"),
            _result("noise_s2", 0.3, corruption="noise", band="high"),
            _result("fog_s1", 0.5, corruption="fog", band="low"),
            _result("blur_s1", 0.4, corruption="blur", band="mid"),
        ]
    )
    assert [(r.band, r.corruption, r.severities) for r in rows] == [
        ("low", "fog", 1),
        ("mid", "blur", 1),
        ("high", "noise", 2),
    ]
    assert rows[2].acr == pytest.approx(0.2)


def test_many_test_sets_are_grouped_by_band_plus_mean() -> None:
    results = [
        _result(f"{c}_s{s}", 0.3, corruption=c, band=b)
        for c, b in (("fog", "low"), ("blur", "mid"), ("noise", "high"))
        for s in (1, 2, 3)
    ]
    public = ResultsPublic(
        submission_id=1,
        benchmark="b",
        model_name="m",
        state="finished",
        protocol_version="v",
        manifest={},
        summary=None,
        results=results,
    )
    curves = [
        SetCurves(r.test_set, RADIUS_GRID, np.linspace(1, 0, len(RADIUS_GRID)), None, True)
        for r in results
    ]
    figure = certified_accuracy_chart(public, curves)
    labels = list(dict.fromkeys(row["series"] for row in figure.spec["data"]["values"]))
    assert labels == [
        "low band (3 sets)",
        "mid band (3 sets)",
        "high band (3 sets)",
        "mean over 9 test sets",
    ]


def test_the_spectrum_says_radial_and_an_empty_bin_does_not_squash_the_axis(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Generated digits hold no energy at one radial bin (log10 ≈ −11): that bin is left out
    and named, instead of stretching the axis to −11 (issue 25 §1)."""
    from api.web import datasets

    profile = 10.0 ** np.r_[2.5, np.linspace(1.2, 0.4, 21), -11.0]
    monkeypatch.setattr(datasets, "_spectrum", lambda *args: profile)
    local = {"default": datasets.LocalConfig("default", tmp_path, "test")}
    figure = datasets.spectra_chart(local)
    spec = figure.spec
    assert spec["layer"][0]["encoding"]["x"]["title"] == "radial frequency f (cycles per image)"
    assert spec["layer"][0]["encoding"]["y"]["scale"]["domain"] == [0.0, 3.0]
    assert "1 value(s) more than 4 decades below the median" in figure.description
    assert "azimuthal" not in json.dumps(spec)
