"""Every script in ``benchmarks/`` runs in its ``--smoke`` mode (tiny sizes) and prints its
figures, so none rots unnoticed again (issue 27 §1: ``api_load.py`` seeded figures into columns
that no longer existed and every board it seeded answered 500). A script without ``--smoke``
fails by name. No timing is asserted: the figures of a smoke run mean nothing.

The scripts are split into three groups, one test file each (``test_smoke_*.py``), so that the
suite's test processes run them side by side; ``test_smoke_groups.py`` fails on a script that is
in no group."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support import timing

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))
#: A figure: a number with a unit or a ratio, as every script prints them.
FIGURE = re.compile(r"\d(\.\d+)?\s*(ms|s\b|×|x\b|req/s|images/s|img/s|%)|ratio|\|\s*\d")

#: Script stems by group, balanced by their smoke run times (the service group starts servers).
GROUPS = {
    "service": ("api_load", "cli_commands", "cli_start", "effective_robustness_read",
                "service_intervals", "web_leaderboard"),
    "science": ("certify_throughput", "fourier_heatmap", "fourier_lens", "interval_coverage",
                "pd_threat", "robustness_stage", "train_throughput", "weather_attack"),
    "data": ("generate_cifar_f", "generate_corruptions", "web_figures"),
}  # fmt: skip


def scripts_of(group: str) -> list[Path]:
    """The group's scripts (a name that is not a script fails the group's tests by name)."""
    return [ROOT / "benchmarks" / f"{stem}.py" for stem in GROUPS[group]]


def run_smoke(script: Path) -> None:
    """Run ``script --smoke`` in a fresh interpreter; fail with its output unless it exits 0
    and prints a figure."""
    assert "--smoke" in script.read_text(encoding="utf-8"), (
        f"benchmarks/{script.name} has no --smoke mode: add one with tiny sizes (seconds) so "
        "the suite runs it"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CERTBENCH_")}
    # a short TMPDIR: Chromium (web_figures.py) refuses a profile whose socket path is > 107 bytes
    scratch = tempfile.mkdtemp(prefix="cb-smoke-", dir="/tmp")
    env |= {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "benchmarks"), "TMPDIR": scratch}
    for name in ("CERTBENCH_TEST_POSTGRES_URL", "CERTBENCH_CHROMIUM"):
        if name in os.environ:
            env[name] = os.environ[name]
    try:
        done = subprocess.run(
            [sys.executable, str(script), "--smoke"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timing.seconds(600),
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    output = done.stdout + done.stderr
    assert done.returncode == 0, (
        f"{script.name} --smoke exited {done.returncode}:\n{output[-3000:]}"
    )
    assert FIGURE.search(done.stdout), (
        f"{script.name} --smoke printed no figures:\n{output[-3000:]}"
    )
