"""Cost of the service's intervals and tie marks on CIFAR-F-sized entries (192 test sets × 500
images), in one process: what aggregation adds (every figure's interval, and each test set's),
and a leaderboard tie test from the records files (192 parquet reads per entry) against the same
test from the entries' image-terms files (one read each), whose p-values must agree.

    uv run python benchmarks/service_intervals.py [--sets 192] [--images 500]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from certbench.stats import ImageTerms, compare_acr, compare_terms, figure_intervals, image_terms


def entry(rng: np.random.Generator, shift: float, sets: int, images: int) -> dict[str, pa.Table]:
    """Records-shaped tables of one simulated entry: sets corrupting the same source images."""
    difficulty = rng.normal(size=images)
    tables = {}
    for k in range(sets):
        margin = shift - difficulty + rng.normal(scale=0.7, size=images)
        correct = margin > 0
        tables[f"s{k:03d}"] = pa.table({
            "index": np.arange(images) * 20, "correct": correct,
            "radius": np.where(correct, 0.25 * np.minimum(margin, 3.81), 0.0),
            "prediction": np.where(correct, 1, -1),
            "n_y": np.round(1e5 / (1 + np.exp(-margin))).astype(np.int64),
            "n": np.full(images, 100_000),
        })  # fmt: skip
    return tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: checks that it runs (seconds)"
    )
    parser.add_argument("--sets", type=int, default=192)
    parser.add_argument("--images", type=int, default=500)
    args = parser.parse_args()
    if args.smoke:
        args.sets, args.images = 6, 50
    rng = np.random.default_rng(0)
    a, b = (entry(rng, shift, args.sets, args.images) for shift in (0.5, 0.45))

    started = time.perf_counter()
    figure_intervals(a, groups={"low": sorted(a)[: args.sets // 3]})
    for name, table in a.items():
        figure_intervals({name: table})
    aggregate = time.perf_counter() - started

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for tag, tables in (("a", a), ("b", b)):
            (root / tag).mkdir()
            for name, table in tables.items():
                pq.write_table(table, root / tag / f"{name}.parquet")
            pq.write_table(image_terms(tables).to_table(), root / f"{tag}_terms.parquet")
        started = time.perf_counter()
        from_records = compare_acr(
            *({p.stem: pq.read_table(p) for p in sorted((root / t).glob("*.parquet"))}
              for t in ("a", "b"))
        )  # fmt: skip
        records_seconds = time.perf_counter() - started
        started = time.perf_counter()
        ta, tb = (ImageTerms.from_table(pq.read_table(root / f"{t}_terms.parquet"), args.sets)
                  for t in ("a", "b"))  # fmt: skip
        from_terms = compare_terms(ta, tb, "acr")
        terms_seconds = time.perf_counter() - started
    assert from_terms.p_value == from_records.p_value, (from_terms, from_records)
    print(f"aggregate: intervals of every figure and of {args.sets} test sets: {aggregate:.2f} s")
    print(f"tie test from records: {records_seconds * 1e3:.0f} ms; from image terms: "
          f"{terms_seconds * 1e3:.1f} ms (ratio {records_seconds / terms_seconds:.0f}x); "
          f"p-value {from_terms.p_value:.4g} both")  # fmt: skip


if __name__ == "__main__":
    main()
