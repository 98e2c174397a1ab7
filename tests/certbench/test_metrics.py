"""Metrics from records: ACR, certified accuracy, p_A ECDF, mACR and bands, α recomputation."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import beta, norm

from certbench.errors import RecordsError
from certbench.smoothing.core import ABSTAIN, CertifyRecord, lower_confidence_bound
from certbench.smoothing.metrics import (
    CIFAR_C_BANDS,
    PA_GRID,
    acr,
    band_means,
    certified_accuracy,
    certified_accuracy_curve,
    macr,
    mean_by_group,
    pa_ecdf,
    pa_quantiles,
    recompute_at_alpha,
    summarize,
)
from certbench.smoothing.records import records_to_table


def record(
    index: int,
    label: int,
    n_a: int,
    *,
    selected: int | None = None,
    n: int = 1000,
    n_y: int | None = None,
    sigma: float = 0.25,
    alpha: float = 0.001,
) -> CertifyRecord:
    """A record built the way CERTIFY builds it, from counts."""
    selected = label if selected is None else selected
    pa_lower = lower_confidence_bound(n_a, n, alpha)
    prediction = selected if pa_lower >= 0.5 else ABSTAIN
    radius = sigma * norm.ppf(pa_lower) if pa_lower >= 0.5 else 0.0
    return CertifyRecord(
        index=index,
        label=label,
        prediction=prediction,
        radius=float(radius),
        pa_lower=pa_lower,
        selected=selected,
        n_a=n_a,
        n_y=n_a if (n_y is None and selected == label) else (n_y or 0),
        n=n,
        n0=100,
        correct=prediction == label,
        seconds=0.5,
        sigma=sigma,
        alpha=alpha,
    )


@pytest.fixture
def records() -> list[CertifyRecord]:
    return [
        record(0, 1, 1000),  # correct, maximum radius
        record(1, 2, 900),  # correct
        record(2, 3, 700),  # correct, small radius
        record(3, 4, 990, selected=5, n_y=3),  # wrong with a large radius
        record(4, 0, 480, n_y=480),  # abstains
    ]


def test_acr_counts_wrong_and_abstained_as_zero(records):
    radii = [r.radius for r in records]
    assert records[4].prediction == ABSTAIN
    assert acr(records) == pytest.approx((radii[0] + radii[1] + radii[2]) / 5)


def test_certified_accuracy_at_grid_and_curve(records):
    values = certified_accuracy(records, [0.0, 0.1, records[1].radius, 10.0])
    assert values[0.0] == pytest.approx(3 / 5)
    assert values[10.0] == 0.0
    assert values[records[1].radius] == pytest.approx(2 / 5)
    radii, accuracy = certified_accuracy_curve(records)
    assert radii[0] == 0.0 and accuracy[0] == pytest.approx(3 / 5)
    assert np.all(np.diff(accuracy) <= 0)
    assert len(radii) == 4  # 0 and the three distinct correct radii
    assert accuracy[-1] == pytest.approx(1 / 5)


def test_pa_ecdf_is_fraction_correct_with_pa_at_least_x(records):
    curve = pa_ecdf(records)
    assert len(curve) == len(PA_GRID) == 501
    assert PA_GRID[0] == 0.5 and PA_GRID[-1] == 1.0
    pa = np.array([r.n_y / r.n for r in records])
    correct = np.array([r.correct for r in records])
    for x in (0.5, 0.7, 0.9, 0.9001, 1.0):
        i = int(np.argmin(np.abs(PA_GRID - x)))
        expected = np.mean(correct & (pa >= PA_GRID[i]))
        assert curve[i] == pytest.approx(expected)
    assert curve[-1] == pytest.approx(1 / 5)  # only n_y = n
    assert np.all(np.diff(curve) <= 0)


def test_summary_and_table_input_agree(records):
    summary = summarize(records)
    from_table = summarize(records_to_table(records))
    assert summary == from_table
    assert summary.count == 5
    assert summary.abstain_rate == pytest.approx(1 / 5)
    assert summary.clean_accuracy == pytest.approx(3 / 5)
    pa = sorted(r.n_y / r.n for r in records)
    assert summary.pa_median == pytest.approx(pa[2])
    assert pa_quantiles(records, [0.0, 1.0]) == {0.0: pa[0], 1.0: pa[-1]}
    assert set(summary.to_dict()["certified_accuracy"]) == {"0", "0.25", "0.5", "0.75", "1"}


def test_band_means_and_macr_reproduce_sun_et_al_table_2_gaussian_row():
    # per-corruption ACR of the Gaussian-augmentation row of Sun et al., ECCV 2022, Table 2
    # (CIFAR-10-C)
    acr_by_corruption = {
        "gaussian_noise": 0.448,
        "shot_noise": 0.448,
        "impulse_noise": 0.421,
        "defocus_blur": 0.380,
        "glass_blur": 0.346,
        "motion_blur": 0.338,
        "zoom_blur": 0.357,
        "snow": 0.394,
        "frost": 0.347,
        "fog": 0.187,
        "brightness": 0.439,
        "contrast": 0.137,
        "elastic_transform": 0.342,
        "pixelate": 0.420,
        "jpeg_compression": 0.440,
    }
    bands = band_means(acr_by_corruption, CIFAR_C_BANDS)
    assert bands == pytest.approx({"low": 0.301, "mid": 0.353, "high": 0.435}, abs=6e-4)
    assert macr(acr_by_corruption) == pytest.approx(0.363, abs=6e-4)


def test_mean_by_group_averages_severities():
    values = {"fog_s1": 0.4, "fog_s2": 0.2, "snow_s1": 0.3}
    groups = {"fog_s1": "fog", "fog_s2": "fog", "snow_s1": "snow"}
    assert mean_by_group(values, groups) == pytest.approx({"fog": 0.3, "snow": 0.3})
    with pytest.raises(RecordsError, match="no group"):
        mean_by_group({"x": 1.0}, groups)


def test_band_means_name_missing_corruptions():
    with pytest.raises(RecordsError, match="fog"):
        band_means({"snow": 0.3}, {"low": ("snow", "fog")})


def test_recompute_at_alpha_from_counts(records):
    same = recompute_at_alpha(records, 0.001)
    assert same == records
    loose = recompute_at_alpha(records, 0.05)
    for before, after in zip(records, loose, strict=True):
        assert after.pa_lower == pytest.approx(beta.ppf(0.05, after.n_a, after.n - after.n_a + 1))
        assert after.pa_lower >= before.pa_lower
        assert after.alpha == 0.05
    # 480/1000 cannot certify at any α; a borderline count flips from abstain to certified
    borderline = record(9, 1, 520)
    assert borderline.prediction == ABSTAIN
    flipped = recompute_at_alpha([borderline], 0.2)[0]
    assert flipped.prediction == 1 and flipped.radius > 0 and flipped.correct


def test_recompute_refuses_looser_alpha_for_early_abstained_records():
    early = replace(record(0, 1, 100, n=4000), early_abstain=True)
    assert recompute_at_alpha([early], 0.0001)[0].prediction == ABSTAIN
    with pytest.raises(RecordsError, match="early"):
        recompute_at_alpha([early], 0.01)


def test_empty_records_are_an_error():
    with pytest.raises(RecordsError, match="at least one"):
        acr([])
    with pytest.raises(RecordsError, match="at least one"):
        macr({})
