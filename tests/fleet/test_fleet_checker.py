"""The fleet check's parts that need no fleet: the checker's invariants over a recorded history
and the switch's rules (``scripts/fleet``, issue 36)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.fleet_check import checker  # noqa: E402
from scripts.fleet_check.observe import RunFacts  # noqa: E402
from scripts.fleet_check.switch import Block, Impair  # noqa: E402

KEY = ["certification", "clean", 1]
LAPSE = "2026-01-01T12:00:10+00:00"
LAPSE_AT = 1767268810.0  # the epoch seconds of LAPSE


def _run(*, began: float, worker: str = "w1@h/1", history_worker: str = "w1@h/1") -> RunFacts:
    """A run whose shard KEY was recorded by ``worker`` with an attempt begun at ``began``,
    after ``history_worker``'s claim on it lapsed at LAPSE."""
    run = RunFacts(id=7, state="finished", reason=None, shards_total=1, entries=1)
    run.shards.append(
        {"key": KEY, "worker": worker, "at": began + 5.0, "seconds": 5.0, "start": 0, "stop": 4}
    )
    run.dispatches.append(
        {"key": KEY, "history": [{"worker": history_worker, "lease_expired_at": LAPSE}]}
    )
    return run


def test_a_result_of_the_attempt_whose_claim_lapsed_is_a_late_result():
    late = checker.late_results(_run(began=LAPSE_AT - 30))
    assert [item["shard"] for item in late] == [KEY]
    assert checker.shard_problems(_run(began=LAPSE_AT - 30))["late_results"]


def test_a_fresh_claim_after_the_lapse_is_not_a_late_result():
    # the healed worker took the re-sent shard again and computed it anew: its one result
    assert checker.late_results(_run(began=LAPSE_AT + 40)) == []
    # another worker's claim lapsed, this one's did not
    assert checker.late_results(_run(began=LAPSE_AT - 30, history_worker="w2@h/2")) == []


def _call(status: int | None, retry_after: str | None = None) -> dict[str, object]:
    return {"at": 1.0, "host": "api1", "method": "GET", "path": "/", "status": status,
            "seconds": 0.1, "error": None, "retry_after": retry_after}  # fmt: skip


def _answers_invariant(calls: list[dict[str, object]]) -> dict[str, object]:
    items = checker.invariants({}, {}, calls, [], [])
    return next(i for i in items if i["invariant"].startswith("only 2xx"))


def test_only_2xx_4xx_and_503_with_retry_after_are_allowed():
    assert _answers_invariant([_call(200), _call(404), _call(503, "5")])["ok"]
    assert not _answers_invariant([_call(500)])["ok"]
    assert not _answers_invariant([_call(502)])["ok"]
    assert not _answers_invariant([_call(503)])["ok"]  # no Retry-After
    assert not _answers_invariant([_call(None)])["ok"]  # no answer at all


def test_unfinished_and_duplicated_runs_break_their_invariants():
    run = _run(began=LAPSE_AT + 40)
    run.shards.append(dict(run.shards[0]))  # the same shard stored twice
    failed = RunFacts(id=8, state="failed", reason="lease_expired", shards_total=0)
    items = {i["invariant"]: i for i in checker.invariants(
        {7: {}, 8: {}}, {7: run, 8: failed}, [], [], [])}  # fmt: skip
    assert not items["every accepted run finished"]["ok"]
    assert items["every accepted run finished"]["detail"][0]["run"] == 8
    shards = items["every shard stored exactly once, no late result, one entry per run"]
    assert not shards["ok"] and shards["detail"][0]["duplicate_rows"] == 1


def _frame(src_port: int, dst_port: int) -> bytes:
    """An Ethernet + IPv4 + TCP header with the given ports."""
    ethernet = b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00"
    ip = bytes([0x45, 0]) + b"\x00\x28" + b"\x00" * 5 + bytes([6]) + b"\x00" * 10
    return ethernet + ip + src_port.to_bytes(2, "big") + dst_port.to_bytes(2, "big") + b"\0" * 16


def test_a_port_partition_cuts_only_that_port_between_those_hosts():
    redis_cut = Block("w1", "db", 6379)
    assert redis_cut.matches("w1", "db", _frame(40000, 6379))
    assert redis_cut.matches("db", "w1", _frame(6379, 40000))
    assert not redis_cut.matches("w1", "db", _frame(40000, 5432))  # PostgreSQL still reached
    assert not redis_cut.matches("w2", "db", _frame(40000, 6379))  # another worker
    everything = Block("w1", None, None)
    assert everything.matches("api1", "w1", _frame(1, 2))
    assert not everything.matches("api1", "db", _frame(1, 2))


def test_netem_draws_lose_duplicate_delay_and_reorder_at_their_rates():
    impair = Impair("w2", delay_ms=200, jitter_ms=50, loss=0.1, duplicate=0.05, reorder=0.25)
    rng = random.Random(3)
    copies = [impair.delays(rng) for _ in range(20000)]
    lost = sum(1 for c in copies if not c) / len(copies)
    doubled = sum(1 for c in copies if len(c) == 2) / len(copies)
    delays = [d for c in copies for d in c]
    at_once = sum(1 for d in delays if d == 0.0) / len(delays)
    delayed = sorted(d for d in delays if d > 0)
    assert abs(lost - 0.1) < 0.015 and abs(doubled - 0.045) < 0.01
    assert abs(at_once - 0.25) < 0.02
    assert abs(delayed[len(delayed) // 2] - 0.2) < 0.01  # the median delay: 200 ms
    assert impair.counts["frames"] == 20000 and impair.counts["lost"] == round(lost * 20000)


def test_a_fleets_owner_is_alive_only_as_the_process_that_built_it():
    """``--cleanup`` (and every check's start) removes fleets whose owner is gone, and must
    leave a running one alone whatever its command line (a pytest process builds fleets too)."""
    from scripts.fleet_check import topology

    mark = topology.owner_mark()
    assert topology._alive(mark)
    pid, started = mark.split()
    assert not topology._alive(f"{pid} {int(started) + 1}")  # the pid reused by another process
    assert not topology._alive("999999999 1")
    assert not topology._alive("")


def test_a_faults_row_counts_its_runs_losses_duplicates_refusals_and_answers():
    from scripts.fleet_check.faults import FaultRecord

    run = _run(began=LAPSE_AT + 40)
    run.dispatches[0]["history"].append({"worker": "w1@h/1", "outcome": "fenced"})
    record = FaultRecord("worker-partition", "t", runs=[7], injected_at=100.0, healed_at=150.0,
                         ended_at=170.0)  # fmt: skip
    runs = {7: {"accepted_at": 90.0, "ended_at": 170.0}, 8: {"accepted_at": 10.0,
                                                               "ended_at": 60.0}}  # fmt: skip
    calls = [{**_call(503, "30"), "at": 120.0}, {**_call(500), "at": 130.0},
             {**_call(500), "at": 400.0}]  # fmt: skip
    (row,) = checker.fault_rows([record], runs, {7: run}, calls, [149.0, 152.5], 60.0, {7: True})
    assert row["runs_affected"] == 1  # run 8 ended before the fault
    assert (row["records_lost"], row["duplicates"], row["fenced"]) == (0, 0, 1)
    assert (row["5xx"], row["503"]) == (1, 1)  # the 500 after the phase is not its
    assert row["recovery_s"] == 2.5 and row["delay_s"] == 20.0


def test_runs_submitted_together_are_measured_against_as_many_undisturbed_runs():
    from scripts.fleet_check.faults import FaultRecord

    record = FaultRecord("worker-kill-aggregate", "t", runs=[1, 2], injected_at=20.0,
                         healed_at=25.0, ended_at=150.0)  # fmt: skip
    runs = {1: {"accepted_at": 0.0, "ended_at": 130.0}, 2: {"accepted_at": 1.0,
                                                              "ended_at": 150.0}}  # fmt: skip
    (row,) = checker.fault_rows([record], runs, {}, [], [], 60.0, {})
    assert row["delay_s"] == 30.0  # 150 s for two runs of 60 s each


def test_the_time_scale_stretches_the_ceilings_but_not_the_lease():
    """``--time-scale``: on a loaded machine the shard limits, the visibility timeout and the
    check's waits grow, in the order the workers require; the lease and heartbeat, against
    which the faults are staged, stay; a factor below 1 is refused."""
    from scripts.fleet_check import pace
    from scripts.fleet_check.services import Timings

    quiet = Timings(shard_size=4)
    loaded = quiet.scaled(2.5)
    assert (loaded.soft_limit, loaded.hard_limit, loaded.visibility) == (300, 375, 450)
    assert (loaded.lease, loaded.heartbeat, loaded.shard_size) == (10, 2, 4)
    assert loaded.soft_limit < loaded.hard_limit < loaded.visibility
    try:
        pace.set_factor(3.0)
        assert pace.seconds(120) == 360
        for bad in (0.5, 0.0, float("nan")):
            with pytest.raises(ValueError, match="at least 1"):
                pace.set_factor(bad)
        assert pace.factor() == 3.0
    finally:
        pace.set_factor(1.0)
