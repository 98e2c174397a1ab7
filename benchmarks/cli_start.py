"""How fast ``certbench`` answers before doing any work (issue 34 §6): ``certbench --help``,
``certbench certify --help``, and the refusals of ``train --sigma -1`` (a usage error) and
``certify --n 100000000000000`` (a run beyond the memory limit), each in a fresh interpreter as a
user runs them, against ``python -c pass`` run the same way in the same run (the floor of any
command: the interpreter's own start).

Every figure is the median of the runs and its ratio to that floor; no threshold is asserted
(the docs say ``--help`` answers in under a second: read the seconds). The commands run the
environment's interpreter directly, as the ``certbench`` script does; ``uv run`` adds its own
start. The byte-code cache is the environment's: with ``PYTHONDONTWRITEBYTECODE`` set and a
virtual environment synced without ``uv sync --compile-bytecode``, every start compiles typer,
click and the command modules again. (``compile-bytecode = true`` under ``[tool.uv]`` is no cure:
``uv run`` then walks all of the environment's files at every start, measured 2.49 s median for
``uv run certbench --help`` against 0.94 s without it, load 11 on 2 cores.)

    uv run python benchmarks/cli_start.py [--repeats 7]
    uv run python benchmarks/cli_start.py --smoke     # one run of each, for CI logs
    uv run python benchmarks/cli_start.py --baseline /tmp/old   # vs another checkout

``--baseline DIR`` (a checkout of an older commit, e.g. ``git archive <commit> | tar -x -C DIR``)
times the help commands with that folder first on the path, each baseline run right after the
current one, so both see the same load on a shared machine (an older checkout does not refuse
the two bad commands at once: it loads data and models first, which these placeholder paths do
not hold).
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

CLI = "import sys; from certbench.cli.app import main; sys.argv[0] = 'certbench'; main()"

# fmt: off
COMMANDS: dict[str, tuple[list[str], int]] = {
    "certbench --help": (["--help"], 0),
    "certbench certify --help": (["certify", "--help"], 0),
    "certbench train --sigma -1 (refused)": (
        ["train", "--recipe", "gaussian", "--dataset", "cifar10", "--out", "m", "--sigma", "-1"],
        2,
    ),
    "certbench certify --n 1e14 (refused)": (
        ["certify", "--weights", "w", "--manifest", "m", "--dataset", "cifar10", "--out", "o",
         "--n", "100000000000000"],
        2,
    ),
}
# fmt: on


def wall(argv: list[str], expected: int, cwd: Path, baseline: Path | None = None) -> float:
    """Wall time of one run of ``argv``, which must exit ``expected``; with ``baseline``, that
    folder's packages are imported instead of this checkout's."""
    env = dict(os.environ)
    if baseline is not None:
        env["PYTHONPATH"] = str(baseline)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env, cwd=cwd, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != expected:
        raise SystemExit(
            f"{' '.join(argv[3:])} exited {done.returncode}, not {expected}:\n"
            f"{done.stderr.decode(errors='replace')[-2000:]}"
        )
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--smoke", action="store_true", help="one run of each command")
    parser.add_argument("--baseline", type=Path, help="a checkout of an older commit")
    args = parser.parse_args()
    repeats = 1 if args.smoke else args.repeats
    times: dict[str, list[float]] = {"python -c pass": []}
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        for _ in range(repeats):
            times["python -c pass"].append(wall([sys.executable, "-c", "pass"], 0, cwd))
            for name, (argv, expected) in COMMANDS.items():
                command = [sys.executable, "-c", CLI, *argv]
                times.setdefault(name, []).append(wall(command, expected, cwd))
                if args.baseline is not None and "refused" not in name:
                    key = f"{name}, baseline"
                    times.setdefault(key, []).append(wall(command, expected, cwd, args.baseline))
    floor = statistics.median(times["python -c pass"])
    cache = "off" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "on"
    print(f"median of {repeats} run(s), each a fresh interpreter (byte-code writing {cache})")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<48} {median:6.2f} s  (min {min(values):5.2f} s)  "
              f"{median / floor:6.1f} × python -c pass")  # fmt: skip


if __name__ == "__main__":
    main()
