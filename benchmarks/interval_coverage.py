"""Coverage of certbench.stats.intervals on simulated leaderboards, and the cost of the bootstrap.

Prints, for 1,000 simulated leaderboards of the protocol's size (500 images per test set),
the observed coverage of each 95 % interval, with the stratified-by-test-set bootstrap beside
the cluster (source-image) bootstrap the module uses for mACR; then the time of 1,000
bootstrap resamples of a 192-set × 500-image benchmark (per-image means) against the
stratified resampling of all 96,000 records, in the same process.

    uv run python benchmarks/interval_coverage.py [--boards 1000] [--images 500]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parents[1]))
from certbench.stats import (
    benchmark_replicates,
    bootstrap_means,
    clopper_pearson,
    percentile_bounds,
)
from tests.support.leaderboard_sim import binomial_slack, draw, population


def coverage(low: np.ndarray, high: np.ndarray, truth: float) -> float:
    return float(np.mean((low <= truth) & (truth <= high)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: checks that it runs (seconds)"
    )
    parser.add_argument("--boards", type=int, default=1000)
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--sets", type=int, default=8)
    args = parser.parse_args()
    if args.smoke:
        args.boards, args.images, args.sets = 20, 50, 4
    print(
        f"{args.boards} leaderboards × {args.sets} sets × {args.images} images; "
        f"3 binomial s.e. = {binomial_slack(0.95, args.boards):.3f}"
    )
    for shared in (1.0, 0.0):
        pop = population(sets=args.sets, shared=shared)
        truth = pop.score.mean(axis=1)
        _, d = draw(pop, args.boards, args.images, seed=1)
        low, high = percentile_bounds(bootstrap_means(d.score[3], 1000))
        acr_cov = coverage(low, high, float(truth[3]))
        rows = {}
        for label, shared_flag in (("cluster", True), ("stratified", False)):
            _, reps, _ = benchmark_replicates(list(d.score), shared_flag, 1000, 0)
            rows[label] = coverage(*percentile_bounds(reps), float(truth.mean()))
        k = d.certified_at(0.25)[3].sum(axis=1)
        cp = coverage(*clopper_pearson(k, args.images), float(pop.certified_at(0.25)[3].mean()))
        print(
            f"sets share source images={shared > 0}: ACR {acr_cov:.3f}  "
            f"mACR cluster {rows['cluster']:.3f}  mACR stratified {rows['stratified']:.3f}  "
            f"certified acc. @0.25 (Clopper-Pearson) {cp:.3f}"
        )
    rng = np.random.default_rng(0)
    big = rng.random((192, args.images))
    started = time.perf_counter()
    bootstrap_means(big.mean(axis=0), 1000)
    cluster = time.perf_counter() - started
    started = time.perf_counter()
    bootstrap_means(big, 1000).mean(axis=0)
    stratified = time.perf_counter() - started
    print(
        f"1,000 resamples of 192 sets × {args.images} images: cluster {cluster:.3f} s, "
        f"stratified {stratified:.2f} s ({stratified / cluster:.0f}×)"
    )


if __name__ == "__main__":
    main()
