"""Probit-domain trends, effective robustness with intervals, metric predictors, JSON input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import binomtest, norm

from certbench.errors import EffectiveRobustnessError
from certbench.lens.effective import (
    Accuracy,
    Entry,
    effective_robustness,
    entries_from_json,
    fit_line,
    group_by_sigma,
    metric_predictors,
)

SLOPE, INTERCEPT = 0.8, -0.4


def on_line(id_acc: float, total: int, shift: float = 0.0) -> tuple[Accuracy, Accuracy]:
    ood = norm.cdf(INTERCEPT + SLOPE * norm.ppf(id_acc) + shift)
    return Accuracy(round(id_acc * total), total), Accuracy(round(ood * total), total)


def entries(total: int, sigma: float = 0.25, count: int = 10) -> list[Entry]:
    out = []
    for i, acc in enumerate(np.linspace(0.55, 0.95, count)):
        id_a, ood_a = on_line(float(acc), total)
        out.append(Entry(f"m{i}", sigma, id_a, {"noise": ood_a}))
    return out


def test_probit_fit_recovers_slope_and_intercept():
    trend = effective_robustness(entries(total=10**7), "noise")
    assert trend.fit.slope == pytest.approx(SLOPE, abs=1e-3)
    assert trend.fit.intercept == pytest.approx(INTERCEPT, abs=1e-3)
    assert trend.fit.r2 > 0.9999 and trend.fit.n == 10 and trend.sigma == 0.25
    assert all(abs(v.value) < 1e-3 for v in trend.entries)


@pytest.mark.parametrize("shift", [0.5, -0.5])
def test_entry_off_the_line_has_er_of_its_sign_with_an_interval_excluding_zero(shift):
    group = entries(total=10_000)
    id_a, ood_a = on_line(0.75, 10_000, shift=shift)
    group.append(Entry("outlier", 0.25, id_a, {"noise": ood_a}))
    trend = effective_robustness(group, "noise")
    outlier = trend.entries[-1]
    assert np.sign(outlier.value) == np.sign(shift)
    assert outlier.low > 0 if shift > 0 else outlier.high < 0
    assert np.sign(outlier.accuracy_gain) == np.sign(shift)
    assert all(v.low <= 0 <= v.high for v in trend.entries[:-1])


def test_er_intervals_cover_zero_for_entries_on_the_true_line():
    """Binomial sampling around an exact trend: the intervals (which err wide) cover ER = 0 at
    least at their nominal rate."""
    rng = np.random.default_rng(0)
    covered, total = 0, 0
    for _ in range(200):
        group = []
        for i, acc in enumerate(rng.uniform(0.5, 0.95, 8)):
            ood = norm.cdf(INTERCEPT + SLOPE * norm.ppf(acc))
            group.append(
                Entry(
                    f"m{i}",
                    0.5,
                    Accuracy(int(rng.binomial(2000, acc)), 2000),
                    {"c": Accuracy(int(rng.binomial(2000, ood)), 2000)},
                )
            )
        for v in effective_robustness(group, "c").entries:
            covered += v.low <= 0 <= v.high
            total += 1
    assert covered / total >= 0.95


def test_fits_refuse_mixed_sigmas_and_too_few_entries():
    mixed = entries(1000, sigma=0.25) + entries(1000, sigma=0.5)
    with pytest.raises(EffectiveRobustnessError, match="σ"):
        effective_robustness(mixed, "noise")
    with pytest.raises(EffectiveRobustnessError, match="σ"):
        metric_predictors(mixed, "noise")
    assert [len(g) for g in group_by_sigma(mixed).values()] == [10, 10]
    with pytest.raises(EffectiveRobustnessError, match="3"):
        effective_robustness(entries(1000, count=2), "noise")
    with pytest.raises(EffectiveRobustnessError, match="same x"):
        fit_line([1.0, 1.0, 1.0], [0.0, 1.0, 2.0])


def test_accuracy_probit_uncertainty_and_clopper_pearson():
    a = Accuracy(300, 400)
    h = 1e-6
    derivative = (norm.ppf(0.75 + h) - norm.ppf(0.75 - h)) / (2 * h)
    assert a.probit_se() == pytest.approx(derivative * math.sqrt(0.75 * 0.25 / 400))
    exact = binomtest(300, 400).proportion_ci(0.95, method="exact")
    assert a.clopper_pearson() == pytest.approx((exact.low, exact.high))
    assert math.isfinite(Accuracy(0, 50).probit()) and math.isfinite(Accuracy(50, 50).probit())
    assert Accuracy.pooled([Accuracy(1, 4), Accuracy(3, 6)]) == Accuracy(4, 10)
    with pytest.raises(EffectiveRobustnessError, match="correct=5"):
        Accuracy(5, 4)


def test_metric_predictors_report_slope_and_r2_per_metric():
    group = entries(total=10**6)
    for i, e in enumerate(group):
        y = e.ood["noise"].probit()
        metrics = {"hff_amplitude": (0.3 - y) / 6, "constant": 1.0, "noise": float(i % 3)}
        group[i] = Entry(e.name, e.sigma, e.id_accuracy, e.ood, metrics)
    fits = {p.metric: p for p in metric_predictors(group, "noise")}
    assert fits["hff_amplitude"].slope == pytest.approx(-6.0) and fits[
        "hff_amplitude"
    ].r2 == pytest.approx(1.0)
    assert fits["id_accuracy"].slope == pytest.approx(SLOPE, abs=1e-2)
    assert math.isnan(fits["constant"].r2) and fits["constant"].n == 10
    assert fits["noise"].r2 < 0.5
    assert list(fits) == ["id_accuracy", "constant", "hff_amplitude", "noise"]


def test_entries_from_json_reads_counts_metrics_and_lens_summaries(tmp_path):
    (tmp_path / "lens").mkdir()
    summary = {"metrics": {"hff_amplitude": {"mean": 0.2}, "cd_phase": {"mean": 40.0}}}
    (tmp_path / "lens" / "summary.json").write_text(json.dumps(summary))
    entry = {
        "name": "a",
        "sigma": 0.25,
        "id": {"correct": 80, "total": 100},
        "ood": {"fog": {"correct": 50, "total": 100}},
        "metrics": {"cd_phase": 42.0},
        "lens_summary": "lens/summary.json",
    }
    (tmp_path / "a.json").write_text(json.dumps({"entries": [entry, {**entry, "name": "b"}]}))
    loaded = entries_from_json(tmp_path / "a.json")
    assert [e.name for e in loaded] == ["a", "b"]
    assert loaded[0].metrics == {"hff_amplitude": 0.2, "cd_phase": 42.0}
    assert loaded[0].ood["fog"] == Accuracy(50, 100)
    (tmp_path / "bad.json").write_text(json.dumps({**entry, "id": {"correct": 80}}))
    with pytest.raises(EffectiveRobustnessError, match=r"bad\.json.* id"):
        entries_from_json(tmp_path / "bad.json")
    (tmp_path / "missing.json").write_text(json.dumps({"name": "x"}))
    with pytest.raises(EffectiveRobustnessError, match="missing"):
        entries_from_json(tmp_path / "missing.json")


def test_predictors_are_fitted_per_architecture_and_averaged_as_in_the_paper():
    """Fridovich-Keil et al., NeurIPS 2022, §4.1: "each reported slope (m) and R² value is
    the average of the corresponding values among the three architectures". Two architectures on
    parallel lines of slope −10 in the metric, offset from each other: each fits exactly (R² = 1,
    m = −10); one line through both mixes the offset in (another slope, R² < 1): the pooled view
    differs."""
    from certbench.lens import per_architecture_predictors
    from certbench.lens.predictors import architectures

    rows = []
    for arch, offset in (("resnet", 0.0), ("wrn", 1.5)):
        for i, hff in enumerate((0.10, 0.12, 0.14, 0.16)):
            ood = Accuracy(round(norm.cdf(1.0 + offset - 10 * hff) * 10**7), 10**7)
            acc = Accuracy(round((0.6 + 0.05 * i) * 10**7), 10**7)
            rows.append(Entry(f"{arch}{i}", 0.25, acc, {"fog": ood}, {"hff": hff}, arch))

    def entry(name: str, acc: float, metrics: dict, arch: str) -> Entry:
        id_a, ood_a = on_line(acc, 10**7)
        return Entry(name, 0.25, id_a, {"fog": ood_a}, metrics, arch)

    rows.append(entry("alone", 0.7, {"hff": 0.3}, "lenet5"))
    rows += [entry(f"x{i}", 0.6 + 0.1 * i, {}, "vgg") for i in range(2)]  # no hff: not fitted
    (fit,) = per_architecture_predictors(rows, "fog", ["hff"])
    assert fit.slope == pytest.approx(-10.0, rel=1e-4) and fit.r2 == pytest.approx(1.0, abs=1e-6)
    assert fit.fitted == 2 and fit.n == 8
    assert fit.counts == {"lenet5": 1, "resnet": 4, "vgg": 0, "wrn": 4}
    assert math.isnan(fit.fits["lenet5"].r2)
    (pooled,) = metric_predictors(rows, "fog", ["hff"])
    assert pooled.r2 < 0.9 and pooled.slope != pytest.approx(fit.slope, rel=0.05)
    assert architectures(rows) == {"lenet5": 1, "resnet": 4, "vgg": 2, "wrn": 4}
