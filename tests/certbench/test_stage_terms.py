"""Per-image terms of the non-certification figures (``certbench.pd.terms``,
``certbench.fourier.terms``, ``certbench.lens.terms``, ``certbench.weather.terms``) and their
intervals and paired tests (``certbench.stats.terms``): the terms' mean is each stage's own
summary figure, the intervals and tests equal their references, and the cluster bootstrap of a
mean over sets covers its true value on 1,000 simulated leaderboards."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest

from certbench.errors import RecordsError
from certbench.fourier.heatmap import assemble_heatmap, summarize_heatmap
from certbench.fourier.protocol import get_protocol
from certbench.fourier.sensitivity import SensitivityRecord
from certbench.fourier.terms import sensitivity_terms
from certbench.lens.metrics import LensRecord, summarize
from certbench.lens.terms import lens_terms
from certbench.pd.evaluation import RobustnessRecord, RobustnessReport
from certbench.pd.terms import robustness_terms
from certbench.smoothing.core import ABSTAIN, CertifyRecord
from certbench.stats.intervals import LEVEL, bootstrap_means, clopper_pearson, percentile_bounds
from certbench.stats.terms import (
    compare_figure,
    figure_interval,
    figure_terms,
    mean_over_sets,
    terms_from_table,
    terms_table,
)
from certbench.weather.records import SmoothedWeatherRecord, WeatherRecord, summarize_weather
from certbench.weather.terms import weather_terms
from tests.support.leaderboard_sim import binomial_slack

BOARDS = 1000


def _certify(rng: np.random.Generator, index: int) -> CertifyRecord:
    correct = bool(rng.random() < 0.7)
    return CertifyRecord(
        index=index, label=0, prediction=0 if correct else ABSTAIN,
        radius=float(rng.uniform(0, 1)) if correct else 0.0, pa_lower=0.5, selected=0, n_a=9,
        n_y=9, n=10, n0=4, correct=correct, seconds=0.0, sigma=0.25, alpha=0.001,
    )  # fmt: skip


# --------------------------------------------------------------------------- stage figures


def test_robustness_terms_average_to_the_report_summary():
    rng = np.random.default_rng(0)
    records = []
    for eps in (8 / 255, 16 / 255):
        for i in rng.permutation(40):
            clean = bool(rng.random() < 0.8)
            linf = clean and bool(rng.random() < 0.5)
            records.append(
                RobustnessRecord(
                    index=int(i) * 20, label=1, eps=eps, clean_prediction=1, clean_correct=clean,
                    linf_robust=linf, pd_robust=linf or (clean and bool(rng.random() < 0.5)),
                    pd_robust_projected=clean, pd_robust_aware=clean, linf_pd_threat=None,
                    linf_pd_anchor=-1,
                )
            )  # fmt: skip
    report = RobustnessReport(records)
    terms = robustness_terms(report.to_table())
    summary = report.summary()
    accuracies = {f"{k}_robust_accuracy_{t}" for k in ("linf", "pd") for t in ("8", "16")}
    assert set(terms) == {"clean_accuracy", *accuracies}
    for name, found in terms.items():
        assert found.estimate == pytest.approx(summary[name], abs=1e-12), name
        assert found.exact_proportion and list(found.index) == [20 * i for i in range(40)]


def _weather(rng: np.random.Generator, smoothed: bool) -> list:
    records = []
    for weather in ("rain", "snow"):
        for severity in (1, 3, 5):
            for i in range(30):
                if smoothed:
                    c = _certify(rng, i)
                    records.append(SmoothedWeatherRecord.from_certify(
                        c, weather=weather, severity=severity, objective=0.0))  # fmt: skip
                    continue
                random_correct = bool(rng.random() < 0.7)
                records.append(
                    WeatherRecord(
                        index=i, label=0, weather=weather, severity=severity, clean_prediction=0,
                        random_prediction=0, attacked_prediction=0, clean_correct=True,
                        random_correct=random_correct,
                        robust=random_correct and bool(rng.random() < 0.5), broken_restart=-1,
                        broken_step=-1, attacked_loss=0.0, restarts_run=1,
                    )
                )  # fmt: skip
    return records


@pytest.mark.parametrize("smoothed", [False, True])
def test_weather_terms_average_to_every_summary_figure(smoothed):
    records = _weather(np.random.default_rng(1), smoothed)
    terms = weather_terms(records)
    figures = summarize_weather(records).figures
    shared = [k for k in figures if k not in ("images", "clean_accuracy")]
    assert shared and set(shared) <= set(terms)
    for name in shared:
        assert terms[name].estimate == pytest.approx(figures[name], abs=1e-12), name
    overall = "attacked_acr" if smoothed else "worst_case_accuracy"
    assert terms[overall].sets == 6 and terms[f"{overall}_rain"].sets == 3
    if not smoothed:  # the leaderboard's random-weather figure: mean over every set
        rows = summarize_weather(records).rows
        expected = np.mean([row["random_accuracy"] for row in rows])
        assert terms["random_accuracy"].estimate == pytest.approx(expected, abs=1e-12)
        assert terms["random_accuracy_rain_3"].exact_proportion


@pytest.mark.parametrize("smoothed", [False, True])
def test_sensitivity_terms_average_to_the_heatmap_band_means(smoothed):
    rng = np.random.default_rng(2)
    points = get_protocol("quick", stride=8).points(32)
    records = [
        SensitivityRecord(
            u=u, v=v, index=i * 2, label=0, signs=(1, 1, 1), epsilon=4.0, base_prediction=0,
            base_correct=bool(rng.random() < 0.6),
            certified=_certify(rng, i * 2) if smoothed else None,
        )
        for (u, v) in points
        for i in range(5)
    ]  # fmt: skip
    terms = sensitivity_terms(records, size=32)
    summary = summarize_heatmap(assemble_heatmap(records, size=32, stride=8))
    maps = ("acr", "base_accuracy") if smoothed else ("base_accuracy",)
    assert {name.split(":")[0] for name in terms} == set(maps)
    for name in maps:
        for band, value in summary[name]["bands"].items():
            assert terms[f"{name}:{band}"].estimate == pytest.approx(value, abs=1e-12)
    assert terms["base_accuracy:all"].sets == 16  # 10 distinct points fill the 4 × 4 grid
    with pytest.raises(RecordsError, match="cells"):
        sensitivity_terms(records[:-1], size=32)


def test_lens_terms_average_to_the_lens_summary():
    rng = np.random.default_rng(3)
    records = [
        LensRecord(
            unit=u, kind=kind, index=u, source=u, target=u + 1, source_label=0, target_label=1,
            length=100, first_prediction=0, hff=float(rng.random()) if kind != "jacobian" else
            math.nan, hff_released=0.0, cd=int(rng.integers(1, 101)), changed=True,
            jacobian_sq=float(rng.uniform(1, 4)) if kind == "jacobian" else math.nan,
        )
        for u, kind in enumerate(["amplitude"] * 6 + ["phase"] * 6 + ["jacobian"] * 5)
    ]  # fmt: skip
    terms = lens_terms(records)
    summary = summarize(records)
    # every stored lens figure with an interval has terms: the headline ones and the secondary
    # Nyquist-kept HFF (leaderboard fields hff_*_nyquist, intervals in models.stages)
    means = {**summary.means(), **{k: v.mean for k, v in summary.nyquist.items()}}
    assert set(terms) == set(means) == {"hff_amplitude", "cd_amplitude", "hff_phase",
                                        "cd_phase", "jacobian_norm", "hff_amplitude_nyquist",
                                        "hff_phase_nyquist"}  # fmt: skip
    for name, value in means.items():
        assert terms[name].estimate == pytest.approx(value, rel=1e-12), name
    assert terms["jacobian_norm"].kind == "rms" and list(terms["cd_phase"].index) == list(
        range(6, 12)
    )


# --------------------------------------------------------------------------- intervals, tests


def test_intervals_equal_their_references():
    rng = np.random.default_rng(4)
    correct = (rng.random(500) < 0.4).astype(float)
    found = figure_interval(figure_terms(np.arange(500), correct, "proportion"))
    low, high = clopper_pearson(int(correct.sum()), 500)
    assert (found.low, found.high, found.method) == (float(low), float(high), "clopper-pearson")
    squares = rng.uniform(1, 9, 300)
    mean_interval = figure_interval(figure_terms(np.arange(300), squares, "mean"))
    low, high = percentile_bounds(bootstrap_means(squares, 1000, np.random.default_rng(0)))
    assert (mean_interval.low, mean_interval.high) == (float(low), float(high))
    root = figure_interval(figure_terms(np.arange(300), squares, "rms"))
    assert root.low == pytest.approx(np.sqrt(low)) and root.high == pytest.approx(np.sqrt(high))
    assert root.estimate == pytest.approx(np.sqrt(squares.mean()))


def test_paired_tests_equal_mcnemar_and_refuse_other_images():
    rng = np.random.default_rng(5)
    a = (rng.random(200) < 0.6).astype(float)
    b = np.where(rng.random(200) < 0.2, 1 - a, a)
    test = compare_figure(
        figure_terms(np.arange(200), a, "proportion"),
        figure_terms(np.arange(200), b, "proportion"),
        "linf_acc_8",
    )
    only_a, only_b = int((a > b).sum()), int((b > a).sum())
    assert test.method == "exact mcnemar"
    assert test.p_value == pytest.approx(binomtest(only_a, only_a + only_b, 0.5).pvalue)
    same = figure_terms(np.arange(200), rng.random(200), "mean")
    tie = compare_figure(same, same, "hff_amplitude")
    assert tie.difference.estimate == 0 and tie.p_value == 1.0 and not tie.significant()
    shifted = figure_terms(np.arange(200), same.values + 0.3, "mean")
    assert compare_figure(shifted, same, "hff_amplitude").p_value < 0.01
    with pytest.raises(RecordsError, match="different images"):
        compare_figure(same, figure_terms(np.arange(1, 201), same.values, "mean"), "x")
    with pytest.raises(RecordsError, match="0/1"):
        figure_terms([0, 1], [0.5, 1.0], "proportion")


def test_terms_tables_round_trip():
    rng = np.random.default_rng(6)
    figures = {
        "pd_acc_8": figure_terms([4, 2, 0], [1.0, 0.0, 1.0], "proportion"),
        "weather_acr": figure_terms(np.arange(5), rng.random(5), "mean", sets=3),
        "jacobian_norm": figure_terms(np.arange(2), [1.0, 4.0], "rms"),
    }
    back = terms_from_table(terms_table(figures))
    assert set(back) == set(figures)
    for name, terms in figures.items():
        assert back[name].kind == terms.kind and back[name].sets == terms.sets
        np.testing.assert_array_equal(back[name].index, terms.index)
        np.testing.assert_array_equal(back[name].values, terms.values)


def test_mean_over_severities_cluster_bootstrap_coverage_on_1000_leaderboards():
    """Worst-case accuracy averaged over 3 severities of the same 200 images (a latent
    difficulty per image shared by the severities): nominal 95 % → observed within three
    binomial standard errors, on 1,000 leaderboards drawn from a 100,000-image population."""
    rng = np.random.default_rng(7)
    difficulty = rng.normal(size=100_000)
    margins = np.array([1.0, 0.3, -0.4])[:, None] - difficulty + rng.normal(size=(3, 100_000))
    robust = (margins > 0).astype(float)
    truth = float(robust.mean())
    inside = 0
    for _ in range(BOARDS):
        drawn = rng.integers(0, 100_000, 200)
        sets = {f"s{k}": (np.arange(200), robust[k, drawn]) for k in range(3)}
        interval = figure_interval(mean_over_sets(sets, "proportion"))
        inside += interval.low <= truth <= interval.high
    assert interval.method == "cluster bootstrap"
    assert abs(inside / BOARDS - LEVEL) <= binomial_slack(LEVEL, BOARDS)
