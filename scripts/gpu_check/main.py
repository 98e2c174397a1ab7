"""``scripts/gpu-check [--dry-run] [--budget SECONDS] [--out DIR]``: what a lent GPU measures.

Order: CUDA tests (pytest -m cuda tests/cuda), certification throughput with FLOPs, bytes and
the roofline, the stages' per-image costs, training images/s per recipe; then the two reports
under ``--out``, else ``$OUT``, else ``benchmarks/gpu/``. A wall-clock budget (default 450 s,
inside the 8 minutes an H100 loan allows) skips what would overrun and lists it. ``--dry-run``
runs the same code on the CPU with tiny sizes (CI runs it: tests/cuda/test_gpu_check_dry_run.py).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

from scripts.gpu_check import certification, roofline, stages
from scripts.gpu_check.budget import Budget
from scripts.gpu_check.report import write_reports

ROOT = Path(__file__).resolve().parents[2]


def environment(device: torch.device) -> dict[str, object]:
    cuda = device.type == "cuda"
    return {
        "device_name": torch.cuda.get_device_name(device)
        if cuda
        else platform.processor() or "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "python": platform.python_version(),
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "cpu_threads": torch.get_num_threads(),
    }


DRY_RUN_TESTS = "tests/cuda/test_cuda_smoothing.py"
"""The dry run's share of the CUDA tests (all skip on a CPU; one module keeps CI quick)."""


def run_cuda_tests(timeout: float, target: str = "tests/cuda") -> dict[str, object]:
    """``pytest -m cuda tests/cuda`` in a subprocess; its summary line and exit code."""
    command = [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider",
               "-p", "no:xdist", target]  # fmt: skip
    try:
        run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        out = expired.stdout.decode() if isinstance(expired.stdout, bytes) else expired.stdout
        done = re.findall(r"^(?:FAILED|ERROR) .*$", out or "", flags=re.MULTILINE)
        return {"summary": f"timed out after {timeout:.0f} s (the rest of the check ran)",
                "returncode": "timeout", "failures": done[:40]}  # fmt: skip
    tail = run.stdout.strip().splitlines()[-1:] or [run.stderr.strip()[-300:]]
    failures = re.findall(r"^(?:FAILED|ERROR) .*$", run.stdout, flags=re.MULTILINE)
    return {"summary": tail[0], "returncode": run.returncode, "failures": failures[:40]}


def certification_section(device: torch.device, dry: bool) -> dict[str, object]:
    sizes = certification.DRY if dry else certification.FULL
    model = certification.build_model(sizes.arch, device)
    flops = roofline.flops_per_sample(model, (3, 32, 32), device)
    traffic = {
        bits: roofline.bytes_per_sample(model, (3, 32, 32), device, bits // 8) for bits in (32, 16)
    }
    peaks = roofline.device_peaks(torch.cuda.get_device_name(device)) if not dry else None
    rows = certification.certification_rows(device, sizes, compile_ok=not dry)
    for row in rows:
        precision = str(row["precision"])
        if precision == "fp32" and device.type == "cuda" and torch.backends.cudnn.allow_tf32:
            precision = "tf32"
        element = 16 if precision in ("bf16", "fp16") else 32
        row.update(roofline.roofline(float(row["samples_per_s"]), flops, traffic[element],  # type: ignore[arg-type]
                                     peaks, precision))  # fmt: skip
    return {"arch": sizes.arch, "sizes": vars(sizes), "flops_per_sample": flops,
            "bytes_per_sample_fp32": traffic[32], "bytes_per_sample_bf16": traffic[16],
            "rows": rows}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes (CI)")
    parser.add_argument("--budget", type=float, default=450.0, help="seconds for everything")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--skip-tests", action="store_true")
    args = parser.parse_args(argv)
    out = args.out or Path(os.environ.get("OUT") or ROOT / "benchmarks" / "gpu")
    if not args.dry_run and not torch.cuda.is_available():
        print("gpu-check: CUDA not available (use --dry-run on a CPU)", file=sys.stderr)
        return 2
    device = torch.device("cpu" if args.dry_run else "cuda")
    budget = Budget(args.budget)
    started = time.perf_counter()
    report: dict[str, object] = {"dry_run": args.dry_run, "environment": environment(device)}
    tests = None
    if not args.skip_tests:
        target = DRY_RUN_TESTS if args.dry_run else "tests/cuda"
        tests = budget.run(
            "CUDA tests", 60, lambda: run_cuda_tests(max(60, budget.left() - 240), target)
        )
    report["tests"] = tests or {"summary": "not run", "returncode": None, "failures": []}
    print(f"gpu-check: tests: {report['tests']['summary']}", flush=True)  # type: ignore[index]
    report["certification"] = certification_section(device, args.dry_run)
    print("gpu-check: certification measured", flush=True)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    report["peaks"] = roofline.peaks_dict(roofline.device_peaks(name))
    stage_sizes = stages.DRY if args.dry_run else stages.FULL
    report["stages"] = (
        budget.run("stages", 45, lambda: stages.stage_rows(device, stage_sizes)) or []
    )
    amp = None if args.dry_run else "bf16"
    report["training"] = (
        budget.run("training", 40, lambda: stages.training_rows(device, stage_sizes, amp)) or []
    )
    report["skipped"] = budget.skipped
    report["seconds"] = time.perf_counter() - started
    json_path, md_path = write_reports(report, out)
    print(f"gpu-check: wrote {json_path} and {md_path}")
    failed = tests is not None and tests["returncode"] != 0
    return 1 if failed else 0
