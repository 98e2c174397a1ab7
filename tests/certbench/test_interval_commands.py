"""`certbench metrics` shows intervals; `certbench compare` runs the paired tests on files."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from certbench.cli.app import app
from certbench.cli.intervals import register
from certbench.smoothing.core import ABSTAIN, CertifyRecord
from certbench.smoothing.records import read_benchmark_records, write_records
from certbench.stats.intervals import (
    acr_interval,
    certified_accuracy_intervals,
    compare_acr,
    compare_certified_accuracy,
    pa_band,
)

runner = CliRunner()
register(app)


def synthetic(n: int, skill: float, seed: int, test_set: str = "") -> list[CertifyRecord]:
    """Records whose ACR grows with `skill`; the same image indices for every call."""
    rng = np.random.default_rng(seed)
    margin = skill + rng.normal(size=n)
    correct = margin > 0
    radius = np.where(correct, 0.25 * np.minimum(margin, 3.8), 0.0)
    return [
        CertifyRecord(
            index=20 * i, label=1, prediction=1 if correct[i] else ABSTAIN,
            radius=float(radius[i]), pa_lower=0.6, selected=1, n_a=90_000,
            n_y=int(90_000 * correct[i]), n=100_000, n0=100, correct=bool(correct[i]),
            seconds=0.01, sigma=0.25, alpha=0.001,
        )
        for i in range(n)
    ]  # fmt: skip


def test_metrics_json_carries_intervals_equal_to_the_library(tmp_path):
    records = synthetic(300, 0.5, seed=1)
    path = write_records(records, tmp_path / "r.parquet")
    result = runner.invoke(app, ["metrics", str(path), "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    acr = shown["intervals"]["acr"]
    expected = acr_interval(records)
    assert (acr["ci_low"], acr["ci_high"]) == pytest.approx((expected.low, expected.high))
    assert acr["ci_low"] <= shown["acr"] <= acr["ci_high"]
    cp = certified_accuracy_intervals(records)[0.5]
    assert shown["intervals"]["certified_accuracy"]["0.5"]["ci_high"] == pytest.approx(cp.high)
    assert shown["intervals"]["pa_band"]["half_width"] == pytest.approx(pa_band(records).half_width)
    table = runner.invoke(app, ["metrics", str(path)])
    assert table.exit_code == 0 and "95% interval over images" in table.output
    assert f"{expected.low:.4f}" in table.output


def test_compare_files_reports_the_paired_tests(tmp_path):
    strong, weak = synthetic(400, 1.0, seed=2), synthetic(400, 0.2, seed=3)
    a = write_records(strong, tmp_path / "a.parquet")
    b = write_records(weak, tmp_path / "b.parquet")
    result = runner.invoke(app, ["compare", str(a), str(b), "--radius", "0.25", "--json"])
    assert result.exit_code == 0, result.output
    tests = json.loads(result.output)["tests"]
    assert [t["metric"] for t in tests] == ["acr", "certified_accuracy@0.25"]
    assert tests[0]["p_value"] == pytest.approx(compare_acr(strong, weak).p_value)
    mcnemar = compare_certified_accuracy(strong, weak, 0.25)
    assert tests[1]["p_value"] == pytest.approx(mcnemar.p_value)
    assert tests[1]["method"] == "exact mcnemar" and not tests[1]["tied"]
    same = runner.invoke(app, ["compare", str(a), str(a), "--radius", "0.5"])
    assert same.exit_code == 0 and "tied" in same.output and "differ" not in same.output


def test_compare_folders_is_a_benchmark_comparison(tmp_path):
    for entry, skill in (("a", 0.6), ("b", 0.5)):
        for k, name in enumerate(("fog_s1", "snow_s3")):
            records = synthetic(200, skill - 0.3 * k, seed=10 * k + (entry == "b"))
            for shard in range(2):  # shards of one test set are joined by their metadata
                write_records(
                    records[shard * 100 : (shard + 1) * 100],
                    tmp_path / entry / f"{name}-{shard}.parquet",
                    {"test_set": name},
                )
    assert sorted(read_benchmark_records(tmp_path / "a")) == ["fog_s1", "snow_s3"]
    result = runner.invoke(
        app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--radius", "0", "--json"]
    )
    assert result.exit_code == 0, result.output
    tests = json.loads(result.output)["tests"]
    assert tests[0]["metric"] == "macr" and tests[0]["method"] == "paired cluster bootstrap"
    expected = compare_acr(
        read_benchmark_records(tmp_path / "a"), read_benchmark_records(tmp_path / "b")
    )
    assert tests[0]["p_value"] == pytest.approx(expected.p_value)


def test_compare_of_different_images_is_a_clear_error(tmp_path):
    a = write_records(synthetic(50, 0.5, seed=1), tmp_path / "a.parquet")
    b = write_records(synthetic(60, 0.5, seed=1), tmp_path / "b.parquet")
    result = runner.invoke(app, ["compare", str(a), str(b)])
    assert result.exit_code == 2 and "different images" in result.output
    assert "Traceback" not in result.output


def test_registering_the_compare_command_imports_no_torch_or_scipy():
    code = (
        "import sys, typer; from certbench.cli.intervals import register; "
        "register(typer.Typer()); print('torch' in sys.modules, 'scipy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_compare_piped_prints_every_row_label_in_full(tmp_path):
    """Issue 34 §5: piped into another program on an 80-column terminal, every radius row was
    "certified_acc…"; a pipe now gets each label whole (a real process, stdout a pipe)."""
    a = write_records(synthetic(60, 1.0, seed=2), tmp_path / "a.parquet")
    b = write_records(synthetic(60, 0.2, seed=3), tmp_path / "b.parquet")
    code = "import sys; from certbench.cli.app import main; sys.argv[0] = 'certbench'; main()"
    run = subprocess.run(
        [sys.executable, "-c", code, "compare", str(a), str(b)],
        capture_output=True, text=True, check=False, env={**os.environ, "COLUMNS": "80"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    labels = [line.split()[0] for line in run.stdout.splitlines()[2:] if line.strip()]
    assert labels == ["acr", *(f"certified_accuracy@{r:g}" for r in (0, 0.25, 0.5, 0.75, 1))]
    assert "…" not in run.stdout
