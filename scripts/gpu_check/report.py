"""The check's two reports: ``gpu-check.json`` (every figure) and ``gpu-check.md`` (tables)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return "" if value is None else str(value)


def _table(rows: list[dict[str, Any]], columns: list[str]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(row.get(c)) for c in columns) + " |" for row in rows]
    return lines


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        f"# gpu-check: {env['device_name']}",
        "",
        f"torch {env['torch']}, CUDA {env['cuda']}, cuDNN {env['cudnn']}, Python {env['python']}"
        f"; {'dry run (CPU, tiny sizes: no figure to quote)' if report['dry_run'] else 'full run'}"
        f"; {report['seconds']:.0f} s in all.",
        "",
        "## CUDA tests",
        "",
        f"{report['tests']['summary']} (exit code {report['tests']['returncode']})",
        "",
        "## Certification throughput",
        "",
        f"{report['certification']['arch']}, σ = 0.25, CIFAR-shaped inputs; FLOPs/sample "
        f"{_fmt(report['certification']['flops_per_sample'])} (torch's FLOP counter), bytes/"
        f"sample ≈ {_fmt(report['certification']['bytes_per_sample_fp32'])} in fp32 (unfused "
        "estimate); peaks: " + (json.dumps(report["peaks"]) if report["peaks"] else "unknown"),
        "",
    ]
    lines += _table(report["certification"]["rows"], ["config", "batch", "precision", "compile",
                    "samples_per_s", "vs_reference", "tflops", "tb_s", "binding",
                    "roofline_pct"])  # fmt: skip
    lines += ["", "## Stages (per unit, reduced protocols)", ""]
    lines += _table(report["stages"], ["stage", "protocol", "units", "unit", "seconds_per_unit"])
    lines += ["", "## Training", ""]
    lines += _table(report["training"], ["recipe", "arch", "batch", "precision", "images_per_s",
                                         "passes_per_image"])  # fmt: skip
    if report["skipped"]:
        lines += ["", "## Skipped (time budget)", ""] + [f"- {s}" for s in report["skipped"]]
    return "\n".join(lines) + "\n"


def write_reports(report: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """Write ``gpu-check.json`` and ``gpu-check.md`` under ``out`` (created)."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "gpu-check.json", out / "gpu-check.md"
    json_path.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    md_path.write_text(markdown(report), encoding="utf-8")
    return json_path, md_path
