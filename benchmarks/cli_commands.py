"""Wall time of ``certbench metrics`` and ``certbench compare`` on two entries of 91 records (the
demo benchmark's test set), each in a fresh interpreter as a user runs them, against references
run the same way on the same machine: ``python -c "import certbench"`` (the floor of any
command) and ``python -c "import torch"`` (what these commands no longer import).

The figures are ratios to the ``import certbench`` reference, so they travel between machines;
no threshold is asserted anywhere (issue 25 §4 asked for ≤ 3 s; read the seconds).

    uv run python benchmarks/cli_commands.py [--repeats 5] [--records 91]
    uv run python benchmarks/cli_commands.py --smoke     # one run of each, for CI logs
    uv run python benchmarks/cli_commands.py --baseline /tmp/old   # vs another checkout

``--baseline DIR`` (a folder holding an older ``certbench/`` package, e.g. from
``git archive <commit> certbench | tar -x -C DIR``) times the same commands with that package
first on the path, each baseline run right after the current one, so both see the same load on
a shared machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from certbench.smoothing import ABSTAIN, CertifyRecord, write_records

CLI = "import sys; from certbench.cli import main; sys.argv[0] = 'certbench'; main()"


def synthetic(count: int, skill: float, seed: int) -> list[CertifyRecord]:
    """Records of one entry at σ = 0.25, n = 100,000, the same image indices for every call."""
    rng = np.random.default_rng(seed)
    margin = skill + rng.normal(size=count)
    correct = margin > 0
    radius = np.where(correct, 0.25 * np.minimum(margin, 3.8), 0.0)
    return [
        CertifyRecord(
            index=4 * i, label=1, prediction=1 if correct[i] else ABSTAIN,
            radius=float(radius[i]), pa_lower=0.6, selected=1, n_a=90_000,
            n_y=int(90_000 * correct[i]), n=100_000, n0=100, correct=bool(correct[i]),
            seconds=0.01, sigma=0.25, alpha=0.001,
        )
        for i in range(count)
    ]  # fmt: skip


def wall(argv: list[str], baseline: Path | None = None) -> float:
    """Wall time of one run of ``argv`` (which must succeed); with ``baseline``, that folder's
    ``certbench`` package is imported instead of this checkout's."""
    env, cwd = dict(os.environ), None
    if baseline is not None:
        env["PYTHONPATH"] = str(baseline)
        cwd = baseline
    started = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, env=env, cwd=cwd)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--records", type=int, default=91)
    parser.add_argument("--smoke", action="store_true", help="one run of each command")
    parser.add_argument("--baseline", type=Path, help="folder with an older certbench/ package")
    args = parser.parse_args()
    repeats = 1 if args.smoke else args.repeats
    python = [sys.executable]
    with tempfile.TemporaryDirectory() as folder:
        a = write_records(synthetic(args.records, 0.8, 1), Path(folder) / "a.parquet")
        b = write_records(synthetic(args.records, 0.5, 2), Path(folder) / "b.parquet")
        runs = {
            'python -c "import certbench"': [*python, "-c", "import certbench"],
            'python -c "import torch"': [*python, "-c", "import torch"],
            f"certbench metrics ({args.records} records)": [*python, "-c", CLI, "metrics", str(a)],
            f"certbench compare ({args.records} + {args.records})": [
                *python,
                "-c",
                CLI,
                "compare",
                str(a),
                str(b),
            ],
        }
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(repeats):
            for name, argv in runs.items():
                times[name].append(wall(argv))
                if args.baseline is not None and name.startswith("certbench"):
                    times.setdefault(f"{name}, baseline", []).append(wall(argv, args.baseline))
    timed = {name: statistics.median(values) for name, values in times.items()}
    reference = timed['python -c "import certbench"']
    print(f"median of {repeats} run(s), each a fresh interpreter")
    for name, value in timed.items():
        print(f"{name:<50} {value:6.2f} s   {value / reference:6.1f} × import certbench")


if __name__ == "__main__":
    main()
