"""Intervals of every leaderboard figure and paired tests from per-image terms: equal to the
``certbench.stats.intervals`` references they reuse, and the one new interval (the mean p̂_A
quantile's cluster bootstrap) checked for coverage on simulated leaderboards."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from certbench.errors import RecordsError
from certbench.smoothing.metrics import RADII, summarize
from certbench.smoothing.records import records_to_table, table_to_records
from certbench.stats.entry_intervals import (
    _quantile_intervals,
    compare_terms,
    figure_intervals,
    image_terms,
    mean_pa_band,
)
from certbench.stats.image_arrays import SetArrays
from certbench.stats.intervals import (
    LEVEL,
    acr_interval,
    certified_accuracy_intervals,
    clopper_pearson,
    compare_acr,
    compare_certified_accuracy,
    macr_interval,
    mean_certified_accuracy_intervals,
    pa_band,
)
from tests.certbench.test_intervals import records_from
from tests.support.leaderboard_sim import Population, binomial_slack, draw, population

SETS = 4


@pytest.fixture(scope="module")
def pop() -> Population:
    return population(sets=SETS, images=20_000, shared=1.0, seed=3)


@pytest.fixture(scope="module")
def entries(pop):
    """Two entries on the same 120 image indices: A's records from one simulated leaderboard,
    B's from another (other values), each with SETS test sets sharing their images."""
    _, boards = draw(pop, 2, 120, seed=4)
    a = {f"s{k}": records_to_table(records_from(boards, k, 0)) for k in range(SETS)}
    b = {f"s{k}": records_to_table(records_from(boards, k, 1)) for k in range(SETS)}
    return a, b


def test_one_test_set_matches_the_single_set_references(entries):
    table = entries[0]["s1"]
    out = figure_intervals({"s1": table})
    assert out.acr == acr_interval(table)
    assert out.certified_accuracy == certified_accuracy_intervals(table)
    correct = table.column("correct").to_numpy()
    low, high = clopper_pearson(int(correct.sum()), len(correct))
    assert (out.clean_accuracy.low, out.clean_accuracy.high) == (low, high)
    assert out.clean_accuracy.method == "clopper-pearson"
    abstained = int((table.column("prediction").to_numpy() == -1).sum())
    assert out.abstain_rate.estimate == abstained / len(correct)
    assert out.pa_band_half_width == pa_band(table).half_width
    summary = summarize(table)
    assert out.pa_quantiles[0.5].estimate == pytest.approx(summary.pa_median, abs=1e-15)
    assert all(i.low <= i.estimate <= i.high for i in out.pa_quantiles.values())


def test_several_test_sets_match_the_benchmark_references_and_the_figures(entries):
    sets = entries[0]
    out = figure_intervals(sets, groups={"low": ["s0", "s1"], "none": ["elsewhere"]})
    assert out.acr == macr_interval(sets)
    assert out.certified_accuracy == mean_certified_accuracy_intervals(sets)
    assert out.groups == {"low": macr_interval({k: sets[k] for k in ("s0", "s1")})}
    summaries = [summarize(t) for t in sets.values()]
    assert out.clean_accuracy.estimate == pytest.approx(
        np.mean([s.clean_accuracy for s in summaries])
    )
    assert out.abstain_rate.estimate == pytest.approx(np.mean([s.abstain_rate for s in summaries]))
    for q, interval in out.pa_quantiles.items():
        figure = np.mean([s.pa_quantiles[q] for s in summaries])
        assert interval.estimate == pytest.approx(figure, abs=1e-12)
        assert interval.method == "cluster bootstrap" and interval.low <= figure <= interval.high
    assert out.pa_band_half_width is None
    assert out.to_dict()["certified_accuracy"]["0.5"]["ci_low"] == out.certified_accuracy[0.5].low


def test_paired_tests_from_image_terms_equal_the_full_record_tests(entries):
    a, b = entries
    groups = {"low": ["s0", "s1"]}
    ta, tb = image_terms(a, groups=groups), image_terms(b, groups=groups)
    full = compare_acr(a, b)
    compact = compare_terms(ta, tb, "acr")
    assert compact.p_value == full.p_value
    assert compact.difference.estimate == pytest.approx(full.difference.estimate, abs=1e-12)
    assert compact.difference.low == pytest.approx(full.difference.low, abs=1e-12)
    assert compact.difference.high == pytest.approx(full.difference.high, abs=1e-12)
    for r in RADII:
        full = compare_certified_accuracy(a, b, r)
        compact = compare_terms(ta, tb, f"certified@{r:g}")
        assert compact.p_value == full.p_value
        assert compact.difference.estimate == pytest.approx(full.difference.estimate, abs=1e-12)
    band = compare_terms(ta, tb, "acr:low")
    assert band.p_value == compare_acr({k: a[k] for k in groups["low"]},
                                       {k: b[k] for k in groups["low"]}).p_value  # fmt: skip
    roundtrip = type(ta).from_table(ta.to_table(), ta.sets)
    assert compare_terms(roundtrip, tb, "acr") == compare_terms(ta, tb, "acr")


def test_terms_refuse_unshared_images_and_unknown_figures(entries):
    a, b = entries
    shifted = records_to_table([replace(r, index=r.index + 1) for r in table_to_records(a["s0"])])
    with pytest.raises(RecordsError, match="do not share their images"):
        image_terms({"s0": a["s0"], "s1": shifted})
    ta, tb = image_terms(a), image_terms({"s0": shifted})
    with pytest.raises(RecordsError, match="different images"):
        compare_terms(ta, tb, "acr")
    with pytest.raises(RecordsError, match="not among the terms"):
        compare_terms(ta, image_terms(b), "acr:high")
    with pytest.raises(RecordsError, match="at least one"):
        figure_intervals({})


BOARDS = 500
RESAMPLES = 500


def test_mean_pa_median_cluster_bootstrap_coverage_on_500_leaderboards():
    """The leaderboard's p_A median (mean over 4 sets of the per-set median) is covered at its
    nominal 95 % within three binomial standard errors, images shared by the sets."""
    pop = population(sets=SETS, images=50_000, shared=1.0, seed=7)
    truth = float(np.mean([np.quantile(pop.pa_hat[k], 0.5) for k in range(SETS)]))
    _, boards = draw(pop, BOARDS, 100, seed=8)
    covered = 0
    for board in range(BOARDS):
        arrays = [
            SetArrays(
                index=np.arange(100),
                correct=boards.correct[k, board],
                radius=boards.radius[k, board],
                abstain=~boards.correct[k, board],
                pa_hat=boards.pa_hat[k, board],
            )
            for k in range(SETS)
        ]
        interval = _quantile_intervals(arrays, [0.5], True, LEVEL, RESAMPLES, board)[0.5]
        covered += interval.low <= truth <= interval.high
    assert abs(covered / BOARDS - LEVEL) <= binomial_slack(LEVEL, BOARDS)


def test_mean_pa_band_holds_for_the_mean_curve_on_1000_leaderboards():
    """The p_A curve averaged over 8 test sets sharing 200 images stays inside its Bonferroni
    band (each set's Kolmogorov band at 1 − 0.05/8, half-widths averaged) at every x at once
    in ≥ 95 % of 1,000 leaderboards (within three binomial standard errors); one set's band
    is ``pa_band``'s."""
    sets, images, boards = 8, 200, 1000
    pop = population(sets=sets, images=50_000, shared=1.0, seed=9)
    grid = np.round(np.arange(500, 1001) / 1000, 3)

    def curves(correct: np.ndarray, pa_hat: np.ndarray) -> np.ndarray:
        """Each set's p_A curve on the grid (rows: sets)."""
        values = np.sort(np.where(correct, pa_hat, -1.0), axis=-1)
        n = values.shape[-1]
        return np.stack([n - np.searchsorted(v, grid, side="left") for v in values]) / n

    truth = curves(pop.correct, pop.pa_hat).mean(axis=0)
    half, method = mean_pa_band([images] * sets)
    assert method == "kolmogorov, bonferroni over test sets" and 0 < half < 0.2
    _, drawn = draw(pop, boards, images, seed=10)
    inside = sum(
        bool(
            np.all(np.abs(curves(drawn.correct[:, b], drawn.pa_hat[:, b]).mean(0) - truth) <= half)
        )
        for b in range(boards)
    )
    assert inside / boards >= LEVEL - binomial_slack(LEVEL, boards)
    one = records_from(drawn, 0, 0)
    assert mean_pa_band([images]) == (pa_band(one).half_width, "kolmogorov")
    with pytest.raises(RecordsError, match="at least one image"):
        mean_pa_band([])
