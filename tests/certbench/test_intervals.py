"""Intervals and paired tests: against scipy references, and coverage on 1,000 simulated
leaderboards (nominal 95 % → observed within three binomial standard errors)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom, binomtest, kstwo

from certbench.errors import RecordsError
from certbench.smoothing.core import ABSTAIN, CertifyRecord
from certbench.smoothing.metrics import acr, certified_accuracy, macr, pa_ecdf
from certbench.smoothing.records import records_to_table
from certbench.stats.intervals import (
    LEVEL,
    benchmark_replicates,
    bootstrap_means,
    bootstrap_p_value,
    certified_accuracy_intervals,
    clopper_pearson,
    compare_acr,
    compare_certified_accuracy,
    dkw_half_width,
    macr_interval,
    mean_certified_accuracy_intervals,
    pa_band,
    percentile_bounds,
    tied_with_above,
)
from tests.support.leaderboard_sim import Population, binomial_slack, draw, population

BOARDS = 1000
SLACK = binomial_slack(LEVEL, BOARDS)  # 3 standard errors: 0.0207


def records_from(pop: Population, k: int, board: int, offset: int = 0) -> list[CertifyRecord]:
    """Records of set k of one simulated leaderboard (n = 100,000 noise samples per image)."""
    out = []
    for i in range(pop.correct.shape[2]):
        correct = bool(pop.correct[k, board, i])
        n_y = round(float(pop.pa_hat[k, board, i]) * 100_000)
        out.append(
            CertifyRecord(
                index=offset + i, label=0, prediction=0 if correct else ABSTAIN,
                radius=float(pop.radius[k, board, i]), pa_lower=0.5, selected=0, n_a=n_y,
                n_y=n_y, n=100_000, n0=100, correct=correct, seconds=0.0, sigma=0.25,
                alpha=0.001,
            )
        )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def shared_population() -> Population:
    return population(sets=8, images=100_000, shared=1.0, seed=0)


@pytest.fixture(scope="module")
def boards(shared_population) -> Population:
    """1,000 leaderboards of 8 test sets × 100 images drawn from the same source images."""
    return draw(shared_population, BOARDS, 100, seed=1)[1]


# --------------------------------------------------------------------------- references


def test_clopper_pearson_equals_scipy_exact_interval():
    for k, n in [(0, 500), (1, 500), (250, 500), (499, 500), (500, 500), (7, 20)]:
        ours = clopper_pearson(k, n)
        ref = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        assert (float(ours[0]), float(ours[1])) == pytest.approx((ref.low, ref.high), abs=1e-12)


def test_single_set_figures_match_metrics_and_tables(boards):
    records = records_from(boards, 2, 0)
    intervals = certified_accuracy_intervals(records)
    expected = certified_accuracy(records)
    for radius, interval in intervals.items():
        assert interval.estimate == pytest.approx(expected[radius])
        assert interval.low <= interval.estimate <= interval.high
        k = round(interval.estimate * len(records))
        assert (interval.low, interval.high) == pytest.approx(
            tuple(float(v) for v in clopper_pearson(k, len(records)))
        )
    table = records_to_table(records)
    assert certified_accuracy_intervals(table) == intervals
    band = pa_band(table)
    assert np.array_equal(band.curve, pa_ecdf(records))
    assert band.half_width == pytest.approx(kstwo.ppf(0.95, len(records)))
    assert band.half_width <= dkw_half_width(len(records))
    assert (band.low <= band.curve).all() and (band.curve <= band.high).all()


def test_macr_interval_is_the_bootstrap_of_per_image_means(boards):
    benchmark = {f"set{k}": records_from(boards, k, 3) for k in range(8)}
    interval = macr_interval(benchmark, resamples=500, seed=4)
    assert interval.estimate == pytest.approx(macr({n: acr(r) for n, r in benchmark.items()}))
    assert interval.method == "cluster bootstrap"
    per_image = boards.score[:, 3].mean(axis=0)
    replicates = bootstrap_means(per_image, 500, np.random.default_rng(4))
    assert (interval.low, interval.high) == pytest.approx(
        tuple(float(v) for v in percentile_bounds(replicates))
    )
    # sets with different images fall back to independent (stratified) resampling
    shifted = {**benchmark, "other": records_from(boards, 0, 3, offset=1000)}
    assert macr_interval(shifted, resamples=200).method == "stratified bootstrap"
    means = mean_certified_accuracy_intervals(benchmark, radii=(0.25,), resamples=200)
    assert means[0.25].estimate == pytest.approx(boards.certified_at(0.25)[:, 3].mean())


def test_mismatched_entries_and_bad_arguments_are_clear_errors(boards):
    a = records_from(boards, 0, 0)
    with pytest.raises(RecordsError, match="different images"):
        compare_acr(a, records_from(boards, 0, 1, offset=5))
    with pytest.raises(RecordsError, match="different test sets"):
        compare_acr({"fog": a}, {"snow": a})
    with pytest.raises(RecordsError, match="level"):
        certified_accuracy_intervals(a, level=95)
    with pytest.raises(RecordsError, match="repeat"):
        acr_records = a + a[:1]
        certified_accuracy_intervals(acr_records)
    with pytest.raises(RecordsError, match="radius"):
        tied_with_above([a, a], metric="certified_accuracy")


# --------------------------------------------------------------------------- coverage


def covered(low: np.ndarray, high: np.ndarray, truth: float) -> float:
    return float(np.mean((low <= truth) & (truth <= high)))


def test_clopper_pearson_coverage_is_at_least_nominal_and_matches_its_exact_value():
    rng = np.random.default_rng(5)
    n = 500
    for p in (0.02, 0.3, 0.77):
        k = rng.binomial(n, p, size=BOARDS)
        low, high = clopper_pearson(k, n)
        ks = np.arange(n + 1)
        all_low, all_high = clopper_pearson(ks, n)
        exact = float(binom.pmf(ks, n, p)[(all_low <= p) & (p <= all_high)].sum())
        assert exact >= LEVEL
        assert abs(covered(low, high, p) - exact) <= binomial_slack(exact, BOARDS)


def test_acr_bootstrap_coverage_on_1000_leaderboards(shared_population, boards):
    truth = float(shared_population.score[3].mean())
    low, high = percentile_bounds(bootstrap_means(boards.score[3], 1000))
    assert abs(covered(low, high, truth) - LEVEL) <= SLACK


def test_macr_cluster_bootstrap_coverage_on_1000_leaderboards(shared_population, boards):
    truth = float(shared_population.score.mean())
    _, replicates, method = benchmark_replicates(list(boards.score), True, 1000, 0)
    assert method == "cluster bootstrap" and replicates.shape == (BOARDS, 1000)
    low, high = percentile_bounds(replicates)
    assert abs(covered(low, high, truth) - LEVEL) <= SLACK


def test_pa_band_simultaneous_coverage_on_1000_leaderboards(shared_population):
    """The band covers the whole true curve at once in ≥ 95 % of leaderboards (500 images)."""
    pop = shared_population
    grid = np.round(np.arange(500, 1001) / 1000, 3)
    truth_values = np.sort(np.where(pop.correct[5], pop.pa_hat[5], -1.0))
    truth = (len(truth_values) - np.searchsorted(truth_values, grid, side="left")) / len(
        truth_values
    )
    _, d = draw(pop, BOARDS, 500, seed=6)
    epsilon = pa_band(records_from(d, 5, 0)).half_width
    inside = 0
    for board in range(BOARDS):
        values = np.sort(np.where(d.correct[5, board], d.pa_hat[5, board], -1.0))
        curve = (500 - np.searchsorted(values, grid, side="left")) / 500
        inside += bool(np.all(np.abs(curve - truth) <= epsilon))
    assert inside / BOARDS >= LEVEL - SLACK


# --------------------------------------------------------------------------- paired tests


@pytest.fixture(scope="module")
def null_pairs() -> tuple[Population, Population]:
    """Two entries with exactly equal population figures (the pair population is symmetric:
    every (a, b) also appears as (b, a)), scored on the same 100 images of 1,000 boards."""
    one = population(sets=2, images=50_000, shared=1.0, seed=7)
    a = one.map(lambda x: np.concatenate([x[0], x[1]])[None])
    b = one.map(lambda x: np.concatenate([x[1], x[0]])[None])
    idx = np.random.default_rng(8).integers(0, 100_000, size=(BOARDS, 100))
    return a.map(lambda x: x[:, idx]), b.map(lambda x: x[:, idx])


def test_paired_bootstrap_rejects_a_true_null_at_its_level(null_pairs):
    a, b = null_pairs
    difference = a.score[0] - b.score[0]
    _, replicates, _ = benchmark_replicates([difference], True, 1000, 0)
    p_values = bootstrap_p_value(difference.mean(axis=1), replicates)
    assert abs(float(np.mean(p_values < 0.05)) - 0.05) <= binomial_slack(0.05, BOARDS)


def test_exact_mcnemar_is_conservative_and_equals_binomtest(null_pairs):
    a, b = null_pairs
    rejected = 0
    for board in range(200):
        test = compare_certified_accuracy(
            records_from(a, 0, board), records_from(b, 0, board), radius=0.25
        )
        rejected += test.significant()
        if board == 0:
            ca, cb = a.certified_at(0.25)[0, 0], b.certified_at(0.25)[0, 0]
            only_a, only_b = int((ca & ~cb).sum()), int((cb & ~ca).sum())
            assert test.p_value == pytest.approx(binomtest(only_a, only_a + only_b).pvalue)
            assert test.difference.estimate == pytest.approx(ca.mean() - cb.mean())
    assert rejected / 200 <= 0.05 + binomial_slack(0.05, 200)


def test_ranks_are_tied_only_when_the_difference_is_not_significant(boards):
    strong = records_from(boards, 0, 9)
    twin = records_from(boards, 0, 9)  # same figures: p = 1
    weak = records_from(boards, 7, 9)  # same images, far lower ACR
    marks = tied_with_above([strong, twin, weak])
    assert marks[0] is None
    assert marks[1].tied and marks[1].test.p_value == 1.0 and marks[1].rank_above == 1
    assert not marks[2].tied and marks[2].test.p_value < 0.01
    assert marks[2].test.difference.low > 0
    radius_marks = tied_with_above([strong, weak], metric="certified_accuracy", radius=0.25)
    assert radius_marks[1].test.method == "exact mcnemar" and not radius_marks[1].tied
    bench = tied_with_above([{"a": strong, "b": strong}, {"a": weak, "b": weak}])
    assert bench[1].test.metric == "macr" and not bench[1].tied
