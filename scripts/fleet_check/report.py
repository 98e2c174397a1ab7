"""The check's two reports: ``fleet-check.json`` (the whole history and every figure) and
``fleet-check.md`` (the fault table, the invariants and the timeline)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

COLUMNS = [
    ("fault", "fault"),
    ("runs_affected", "runs affected"),
    ("records_lost", "records lost"),
    ("duplicates", "duplicates"),
    ("fenced", "late results refused"),
    ("recovery_s", "recovery after heal (s)"),
    ("api_recovery_s", "API answering again (s)"),
    ("5xx", "5xx (not 503)"),
    ("503", "503"),
    ("no_answer", "no answer"),
    ("held_s", "fault on (s)"),
    ("delay_s", "delay (s)"),
]


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:g}" if isinstance(value, float) else str(value)


def fault_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| " + " | ".join(title for _, title in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(key)) for key, _ in COLUMNS) + " |")
    return lines


def markdown(report: dict[str, Any]) -> str:
    ok = all(i["ok"] for i in report["invariants"])
    t0 = report["started_at"]
    lines = [
        f"# fleet-check: {'every invariant held' if ok else 'INVARIANTS BROKEN'}",
        "",
        f"{'Smoke' if report['smoke'] else 'Full'} run: {report['hosts']}; "
        f"{len(report['runs'])} runs of `{report['benchmark']}`; {report['seconds']:.0f} s in all "
        f"(bring-up {report['bringup_s']:.0f} s, reproduction {report['reproduce_s']:.0f} s). "
        f"Settings: {report['settings']}.",
        "",
        "## Cost of each fault",
        "",
        *fault_table(report["faults_table"]),
        "",
        "Runs affected: runs in flight while the fault was on. Records lost: planned shards never "
        "stored, runs not finished and units whose records differ from the undisturbed run. "
        "Duplicates: shards stored twice or by a worker whose claim had lapsed, extra entries "
        "or results. Late results refused: shards a worker finished after its claim lapsed, not "
        "stored (its claim fenced it off). Recovery: from the heal to the next shard recorded or "
        "run state change. "
        "Delay: from the phase's first submission to its last run's end, beyond as many "
        f"undisturbed runs' time ({_cell(report['baseline_s'])} s each).",
        "",
        "## Invariants",
        "",
    ]
    for item in report["invariants"]:
        mark = "held" if item["ok"] else "BROKEN"
        lines.append(f"- **{mark}**: {item['invariant']}")
        if not item["ok"]:
            lines.append(f"  - {json.dumps(item['detail'], default=str)[:1500]}")
    lines += ["", "## Timeline (seconds from the fleet's start)", ""]
    for fault in report["faults"]:
        marks = [
            f"{k} {fault[k] - t0:.1f}"
            for k in ("submitted_at", "injected_at", "healed_at", "ended_at")
            if fault.get(k)
        ]
        target = fault["details"].get("target", {})
        lines.append(
            f"- `{fault['name']}` ({fault['title']}): {', '.join(marks)}; runs "
            f"{fault['runs']}; target {json.dumps(target)}"
            + (f"; **{fault['error']}**" if fault.get("error") else "")
        )
    return "\n".join(lines) + "\n"


def write_reports(report: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """Write ``fleet-check.json`` and ``fleet-check.md`` under ``out`` (created)."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "fleet-check.json", out / "fleet-check.md"
    json_path.write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    md_path.write_text(markdown(report), encoding="utf-8")
    return json_path, md_path
