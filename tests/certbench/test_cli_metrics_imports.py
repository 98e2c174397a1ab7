"""``certbench metrics`` and ``certbench compare`` load only what they compute with.

Issue 25 §4: both took 17–20 s on 91 records, nearly all of it importing torch (through the
records' dataclass), pandas (through ``pyarrow.dataset``) and ``scipy.stats``. Checked as the
modules a fresh interpreter holds after each command (not as a time, which depends on the
machine; ``benchmarks/cli_commands.py`` prints the seconds), and the torch-free bound, radius and
sign test are checked equal to the ``scipy.stats`` functions they replace.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from scipy.stats import beta, binomtest, norm

from certbench.smoothing import write_records
from certbench.smoothing.outcomes import certified_radius, lower_confidence_bound
from certbench.stats.intervals import clopper_pearson, sign_test_p_value
from tests.certbench.test_interval_commands import synthetic
from tests.support import timing

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from typer.testing import CliRunner
    from certbench.cli.app import app
    from certbench.cli.intervals import register

    register(app)
    result = CliRunner().invoke(app, sys.argv[1:])
    print(json.dumps({"exit": result.exit_code, "output": result.output,
                      "modules": sorted(sys.modules)}))
    """
)


def _run(*argv: str) -> tuple[str, set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *argv],
        capture_output=True,
        text=True,
        timeout=timing.seconds(300),
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["exit"] == 0, shown["output"]
    return shown["output"], set(shown["modules"])


def test_metrics_and_compare_import_neither_torch_nor_pandas(tmp_path) -> None:
    a = write_records(synthetic(91, 0.8, seed=1), tmp_path / "a.parquet")
    b = write_records(synthetic(91, 0.5, seed=2), tmp_path / "b.parquet")
    output, modules = _run("metrics", str(a))
    assert "ACR" in output and "band half-width" in output
    assert not {"torch", "pandas", "pyarrow.dataset"} & modules, "metrics loads a heavy library"
    output, modules = _run("compare", str(a), str(b), "--json")
    assert len(json.loads(output)["tests"]) == 6
    assert not {"torch", "pandas", "pyarrow.dataset", "scipy.stats"} & modules


def test_bound_and_radius_equal_scipy_stats_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 200_000))
        n_a = int(rng.integers(1, n + 1))
        alpha = float(rng.choice([0.001, 0.01, 0.05, rng.uniform(1e-6, 0.5)]))
        bound = lower_confidence_bound(n_a, n, alpha)
        assert bound == float(beta.ppf(alpha, n_a, n - n_a + 1))
        if bound >= 0.5:
            assert certified_radius(bound, 0.25) == float(0.25 * norm.ppf(bound))
    k, trials = np.array([0, 3, 50, 91]), np.array([91, 91, 91, 91])
    low, high = clopper_pearson(k, trials, level=0.95)
    tail = (1 - 0.95) / 2
    assert low[0] == 0.0 and high[-1] == 1.0
    assert np.array_equal(low[1:], beta.ppf(tail, k[1:], trials[1:] - k[1:] + 1))
    assert np.array_equal(high[:-1], beta.ppf(1 - tail, k[:-1] + 1, trials[:-1] - k[:-1]))


@pytest.mark.parametrize("trials", [0, 1, 2, 7, 30, 91, 400])
def test_sign_test_equals_binomtest(trials: int) -> None:
    for k in range(trials + 1):
        expected = 1.0 if trials == 0 else binomtest(k, trials, 0.5).pvalue
        assert sign_test_p_value(k, trials) == pytest.approx(expected, rel=1e-10, abs=1e-300)
