"""The invariants, checked over the recorded history (the client's calls and runs, the fault
records, the database's facts, the reproduced records), and the cost of each fault.

Invariants:

1. every run the API accepted (202) finished;
2. every planned shard is stored exactly once, and never by a worker whose claim on it had lapsed
   (a late result: the reconciler gave the shard away, so the claim must fence the old holder
   off); each run has one leaderboard entry and one result per stage and unit;
3. each run's records are bit-identical to an undisturbed run of the same submission (same
   revealed seed), computed here (``scripts.fleet_check.reproduce``);
4. every request got an answer, and every answer was 2xx, 4xx or 503, each 503 with a
   ``Retry-After``.

Per fault: the runs in flight while it was on, records lost, duplicates, seconds from the heal to
the next progress (a shard recorded or a run changing state, on any run), 5xx answers while it
was on (503 counted apart), and the delay it cost: its runs' time over the undisturbed run's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from datetime import datetime
from typing import Any

from scripts.fleet_check.faults import FaultRecord
from scripts.fleet_check.observe import RunFacts


def late_results(run: RunFacts) -> list[dict[str, Any]]:
    """Shards stored by an attempt that was running when its worker's claim on that shard lapsed
    (the reconciler noted the lapse in the shard's history): a late result got past the fence.

    The stored row says when the recording attempt began (its ``at`` less its ``seconds``, which
    count from after the claim). An attempt begun after the lapse is a fresh claim, by the same
    worker or another (a worker healed from a partition takes the re-sent shard again): its
    result is the shard's one result, not a late one.
    """
    found = []
    histories = {tuple(d["key"]): d["history"] for d in run.dispatches}
    for shard in run.shards:
        began = shard["at"] - shard["seconds"]
        lapses = [
            datetime.fromisoformat(h["lease_expired_at"]).timestamp()
            for h in histories.get(tuple(shard["key"]), [])
            if h.get("worker") == shard["worker"] and "lease_expired_at" in h
        ]
        if any(began < lapsed for lapsed in lapses):
            found.append(
                {
                    "run": run.id,
                    "shard": shard["key"],
                    "worker": shard["worker"],
                    "attempt_began": began,
                    "lapses": lapses,
                }
            )
    return found


def shard_problems(run: RunFacts) -> dict[str, Any]:
    keys = Counter(tuple(s["key"]) for s in run.shards)
    results = Counter(run.results)
    return {
        "missing": max(0, run.shards_total - len(keys)) if run.shards_total else 0,
        "duplicate_rows": sum(n - 1 for n in keys.values() if n > 1),
        "late_results": late_results(run),
        "entries": run.entries,
        "duplicate_results": sum(n - 1 for n in results.values() if n > 1),
    }


def _window(record: FaultRecord) -> tuple[float, float] | None:
    if record.injected_at is None or record.healed_at is None:
        return None
    return record.injected_at, record.healed_at


def fault_rows(
    faults: list[FaultRecord],
    runs: dict[int, dict[str, Any]],
    facts: dict[int, RunFacts],
    calls: list[dict[str, Any]],
    progress: list[float],
    baseline: float | None,
    identical: dict[int, bool],
) -> list[dict[str, Any]]:
    """One row per fault: the cost table of the report and the docs."""
    rows = []
    for record in faults:
        window = _window(record)
        if window is None:
            rows.append({"fault": record.name, "error": record.error or "not staged"})
            continue
        start, healed = window
        affected = sorted(
            i
            for i, r in runs.items()
            if r["accepted_at"] <= healed and (r["ended_at"] or healed) >= start
        )
        lost = sum(shard_problems(facts[i])["missing"] for i in affected if i in facts)
        lost += sum(1 for i in affected if i in facts and facts[i].state != "finished")
        lost += sum(1 for i in affected if not identical.get(i, False))
        duplicates = sum(
            p["duplicate_rows"]
            + len(p["late_results"])
            + max(0, p["entries"] - 1)
            + p["duplicate_results"]
            for p in (shard_problems(facts[i]) for i in affected if i in facts)
        )
        fenced = sum(
            1
            for i in affected
            if i in facts
            for d in facts[i].dispatches
            for h in d["history"]
            if h.get("outcome") == "fenced"
        )
        end = record.ended_at or healed
        during = [c for c in calls if start <= c["at"] <= end]
        after = [t for t in progress if t > healed]
        mine = [runs[i] for i in record.runs if i in runs]
        ended = [r["ended_at"] for r in mine if r["ended_at"]]
        # the phase's time beyond its runs' undisturbed time (runs submitted together share the
        # fleet: two take about twice one)
        span = max(ended) - min(r["accepted_at"] for r in mine) if ended else None
        row: dict[str, Any] = {
            "fault": record.name,
            "injected_at": start,
            "healed_at": healed,
            "held_s": round(healed - start, 1),
            "runs_affected": len(affected),
            "records_lost": lost,
            "duplicates": duplicates,
            "fenced": fenced,
            "recovery_s": round(after[0] - healed, 1) if after else None,
            "api_recovery_s": _round(record.details.get("api_recovered_after")),
            "5xx": sum(
                1
                for c in during
                if c["status"] is not None and c["status"] >= 500 and c["status"] != 503
            ),
            "503": sum(1 for c in during if c["status"] == 503),
            "no_answer": sum(1 for c in during if c["status"] is None),
            "delay_s": round(span - len(mine) * baseline, 1)
            if baseline is not None and span is not None and len(ended) == len(mine)
            else None,
            "error": record.error,
        }
        rows.append(row)
    return rows


def _round(value: Any) -> float | None:
    return None if value is None else round(float(value), 1)


def invariants(
    runs: dict[int, dict[str, Any]],
    facts: dict[int, RunFacts],
    calls: list[dict[str, Any]],
    reproduced: list[dict[str, Any]],
    faults: list[FaultRecord],
) -> list[dict[str, Any]]:
    """Each invariant: its name, whether it held, and what broke it."""
    unfinished = [
        {
            "run": i,
            "state": facts[i].state if i in facts else "unknown",
            "reason": facts[i].reason if i in facts else None,
        }
        for i in runs
        if i not in facts or facts[i].state != "finished"
    ]
    problems = {i: shard_problems(f) for i, f in facts.items()}
    shards_bad = [
        {"run": i, **p}
        for i, p in problems.items()
        if p["missing"]
        or p["duplicate_rows"]
        or p["late_results"]
        or p["duplicate_results"]
        or (facts[i].state == "finished" and p["entries"] != 1)
    ]
    different = [r for r in reproduced if not r["identical"]]
    not_reproduced = sorted(set(runs) - {r["run"] for r in reproduced})
    statuses = Counter(c["status"] for c in calls)
    bad_status = {
        str(s): n
        for s, n in statuses.items()
        if s is None or not (200 <= s < 300 or 400 <= s < 500 or s == 503)
    }
    no_retry_after = sum(1 for c in calls if c["status"] == 503 and not c["retry_after"])
    unstaged = [{"fault": f.name, "error": f.error} for f in faults if f.error]
    return [
        {"invariant": "every accepted run finished", "ok": not unfinished, "detail": unfinished},
        {
            "invariant": "every shard stored exactly once, no late result, one entry per run",
            "ok": not shards_bad,
            "detail": shards_bad,
        },
        {
            "invariant": "records bit-identical to an undisturbed run (same revealed seed)",
            "ok": not different and not not_reproduced,
            "detail": different
            + [{"run": i, "difference": "not reproduced"} for i in not_reproduced],
        },
        {
            "invariant": "only 2xx, 4xx or 503 answers (503 with Retry-After), none missing",
            "ok": not bad_status and not no_retry_after,
            "detail": {
                "statuses": {str(k): v for k, v in statuses.items()},
                "not_allowed": bad_status,
                "503_without_retry_after": no_retry_after,
            },
        },
        {"invariant": "every fault was staged as planned", "ok": not unstaged, "detail": unstaged},
    ]


def facts_json(facts: dict[int, RunFacts]) -> dict[str, Any]:
    return {str(i): asdict(f) for i, f in facts.items()}
