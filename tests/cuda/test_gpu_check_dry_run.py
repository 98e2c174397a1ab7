"""``scripts/gpu-check --dry-run`` runs the GPU check's code on the CPU with tiny sizes and
writes both reports, so the script cannot rot between GPU loans (issue 28). Runs in CI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from certbench.training import RECIPES
from tests.support import timing

ROOT = Path(__file__).resolve().parents[2]
# a subprocess that imports torch and runs for a minute
pytestmark = [pytest.mark.slow, pytest.mark.memory(gib=1)]


def test_gpu_check_dry_run_writes_both_reports(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "OMP_NUM_THREADS": "1"}
    env.pop("CERTBENCH_CUDA_TESTS_DEVICE", None)
    run = subprocess.run(
        [sys.executable, "scripts/gpu-check", "--dry-run"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timing.seconds(300),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    assert report["dry_run"] is True
    assert report["environment"]["torch"]
    assert "skipped" in report["tests"]["summary"] and report["tests"]["returncode"] == 0
    rows = {row["config"]: row for row in report["certification"]["rows"]}
    assert {"reference loop", "defaults", "fp32", "bf16", "bf16 + compile"} <= set(rows)
    assert all(row["samples_per_s"] > 0 for row in rows.values())
    assert rows["reference loop"]["vs_reference"] == 1.0
    assert report["certification"]["flops_per_sample"] > 1e7  # a ResNet-20: ~41 M MACs
    assert rows["fp32"]["tflops"] > 0 and rows["fp32"]["tb_s"] > 0
    stages = {row["stage"] for row in report["stages"]}
    assert {"pd_robustness", "fourier_lens", "weather_attack"} <= stages
    assert any(s.startswith("fourier_heatmap") for s in stages)
    assert {row["recipe"] for row in report["training"]} == set(RECIPES)
    markdown = (tmp_path / "gpu-check.md").read_text()
    assert markdown.startswith("# gpu-check:") and "dry run" in markdown
    for heading in ("## CUDA tests", "## Certification throughput", "## Stages", "## Training"):
        assert heading in markdown
    assert "| reference loop | 400 | fp32 |" in markdown


def test_roofline_names_the_binding_limit():
    sys.path.insert(0, str(ROOT))
    from scripts.gpu_check.roofline import device_peaks, roofline

    h100 = device_peaks("NVIDIA H100 80GB HBM3")
    assert h100 is not None and h100.name == "H100 SXM"
    assert device_peaks("NVIDIA H100 PCIe").name == "H100 PCIe"
    assert device_peaks("NVIDIA H200").hbm_tb_s == 4.8
    assert device_peaks("Tesla T4") is None
    # 1e6 samples/s of 0.5 GFLOP and 1 MB each: 500 TFLOP/s, 1 TB/s; intensity 500 FLOP/B
    compute = roofline(1e6, 5e8, 1e6, h100, "bf16")
    assert compute["binding"] == "compute"
    assert abs(compute["roofline_pct"] - 100 * 500 / 989) < 1e-9
    memory = roofline(1e6, 1e7, 1e6, h100, "bf16")  # 10 FLOP/B: memory-bound at 33.5 TFLOP/s
    assert memory["binding"] == "memory"
    assert abs(memory["roofline_pct"] - 100 * 10 / 33.5) < 1e-9


def test_the_wheel_bundle_builds_within_40_mib():
    run = subprocess.run(
        ["bash", "scripts/gpu-wheels-build"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timing.seconds(120),
    )
    assert run.returncode == 0, run.stderr
    assert "(limit 40 MiB)" in run.stdout
