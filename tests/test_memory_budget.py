"""The machine-wide memory ledger that keeps suites from starting more processes than the
machine holds (``tests.support.memory``), with real processes holding reservations."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import memory, timing

pytestmark = pytest.mark.memory(gib=0.75)

ROOT = Path(__file__).resolve().parents[1]


def _holder(
    ledger: Path, gib: float, *, hold: float, ready: Path, lasting: bool = False
) -> subprocess.Popen[bytes]:
    """Another process (a second suite's test process, say) that reserves ``gib`` for a file
    (or, ``lasting``, for processes it keeps running), says so by creating ``ready``, and gives
    the reservation back after ``hold`` seconds."""
    take = (
        f"memory.release(keep={gib}, ledger=ledger)"
        if lasting
        else f'memory.reserve({gib}, "the other suite\'s file", ledger=ledger)'
    )
    code = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from tests.support import memory
        ledger = Path({str(ledger)!r})
        held = {take}
        Path({str(ready)!r}).touch()
        time.sleep({hold})
        memory.release(held, ledger=ledger)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert process.poll() is None, "the holder process exited before reserving"
        assert time.monotonic() < deadline, "the holder process did not reserve within 60 s"
        time.sleep(0.05)
    return process


@pytest.fixture
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reservation that cannot be granted at its first look raises TimeoutError at once."""
    monkeypatch.setattr(memory, "WAIT_SECONDS", 0)
    monkeypatch.setattr(memory.timing, "seconds", lambda base: base)


@pytest.fixture
def budget(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setenv("CERTBENCH_TEST_MEMORY_GIB", "4")
    return 4.0


def test_reservations_within_the_budget_are_granted_together(tmp_path: Path, budget: float) -> None:
    ledger = tmp_path / "ledger.json"
    first = memory.reserve(1.5, "a", ledger=ledger)
    second = memory.reserve(2.5, "b", ledger=ledger)
    assert [entry["what"] for entry in json.loads(ledger.read_text())] == ["a", "b"]
    memory.release(first, ledger=ledger)
    memory.release(second, ledger=ledger)
    assert json.loads(ledger.read_text()) == []


def test_a_file_heavier_than_the_budget_runs_alone(tmp_path: Path, budget: float) -> None:
    ledger = tmp_path / "ledger.json"
    alone = memory.reserve(budget * 3, "the fleet", ledger=ledger)
    assert json.loads(ledger.read_text())[0]["gib"] == budget * 3
    memory.release(alone, ledger=ledger)


def test_a_reservation_waits_for_another_process_to_give_memory_back(
    tmp_path: Path, budget: float
) -> None:
    ledger = tmp_path / "ledger.json"
    holder = _holder(ledger, 3.0, hold=3.0, ready=tmp_path / "ready")
    try:
        asked = time.monotonic()
        mine = memory.reserve(2.0, "this file", ledger=ledger)
        waited = time.monotonic() - asked
        assert holder.wait(timeout=60) == 0
    finally:
        holder.kill()
    # granted only once the holder had given its 3 GiB back (1 + 2 would pass the 4 GiB budget)
    assert waited > 1.0
    assert [entry["what"] for entry in json.loads(ledger.read_text())] == ["this file"]
    memory.release(mine, ledger=ledger)


def test_a_killed_process_holds_nothing(tmp_path: Path, budget: float, no_wait: None) -> None:
    """A test process killed by the kernel for memory never gives its reservation back."""
    ledger = tmp_path / "ledger.json"
    holder = _holder(ledger, 3.0, hold=600, ready=tmp_path / "ready")
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=60)
    mine = memory.reserve(2.0, "this file", ledger=ledger)  # raises if it had to wait
    memory.release(mine, ledger=ledger)


def test_the_wait_ends_with_who_holds_the_budget(
    tmp_path: Path, budget: float, no_wait: None
) -> None:
    ledger = tmp_path / "ledger.json"
    holder = _holder(ledger, 3.0, hold=600, ready=tmp_path / "ready")
    try:
        with pytest.raises(TimeoutError, match=r"the other suite's file \(3 GiB, pid \d+\)"):
            memory.reserve(2.0, "this file", ledger=ledger)
    finally:
        holder.kill()
        holder.wait(timeout=60)


def test_the_budget_setting_must_be_a_positive_number(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CERTBENCH_TEST_MEMORY_GIB", "lots")
    with pytest.raises(ValueError, match="number of GiB"):
        memory.budget_gib()
    monkeypatch.setenv("CERTBENCH_TEST_MEMORY_GIB", "0")
    with pytest.raises(ValueError, match="positive"):
        memory.budget_gib()
    monkeypatch.delenv("CERTBENCH_TEST_MEMORY_GIB")
    machine = Path("/proc/meminfo").read_text().split()[1]  # MemTotal in KiB
    assert memory.budget_gib() == pytest.approx(
        memory.BUDGET_SHARE * int(machine) / 1024**2, rel=0.01
    )


def _allocating_child(mib: int, ready: Path) -> subprocess.Popen[bytes]:
    code = (
        f"import time; from pathlib import Path; block = bytearray({mib} * 2**20); "
        f"Path({str(ready)!r}).touch(); time.sleep(600)"
    )
    return subprocess.Popen([sys.executable, "-c", code])


def _wait_for(ready: Path) -> None:
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert time.monotonic() < deadline, f"{ready.name}: the child did not allocate in 60 s"
        time.sleep(0.05)


def _in_a_fresh_process(scenario: str, folder: Path) -> dict[str, Any]:
    """Run ``scenario`` (a function of this module) in a new interpreter and return what it
    returns: the test process may have children of its own (its Chromium, say), which the
    ledger rightly counts, so the measured scenarios need a process with none."""
    code = (
        "import json, sys; from pathlib import Path; "
        f"from tests.test_memory_budget import {scenario}; "
        f"print(json.dumps({scenario}(Path(sys.argv[1]))))"
    )
    env = {**os.environ, "CERTBENCH_TEST_MEMORY_GIB": "4"}
    done = subprocess.run(
        [sys.executable, "-c", code, str(folder)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timing.seconds(120),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def _outgrowing_file(folder: Path) -> dict[str, Any]:
    """A file marked 0.1 GiB whose test starts a child holding 300 MiB, beside a 300 MiB
    process started before the file."""
    memory.LEDGER = folder / "ledger.json"
    memory.SAMPLE_SECONDS = 0.1
    files = memory.FileMemory({"tests/heavy.py": 0.1}, folder / "profile.jsonl")
    earlier = _allocating_child(300, folder / "earlier")
    _wait_for(folder / "earlier")
    files.enter("tests/heavy.py")
    child = _allocating_child(300, folder / "ready")
    try:
        _wait_for(folder / "ready")
        time.sleep(0.5)  # a few samples with the block held
        before_end = files.leave("tests/heavy.py", "tests/heavy.py")
        child.kill()  # the file's processes stop before its end
        child.wait(timeout=60)
        note = files.leave("tests/heavy.py", "tests/light.py")
    finally:
        for process in (child, earlier):
            process.kill()
            process.wait(timeout=60)
    return {"before_end": before_end, "note": note,
            "record": json.loads((folder / "profile.jsonl").read_text()),
            "ledger": json.loads(memory.LEDGER.read_text())}  # fmt: skip


def test_a_file_whose_processes_outgrow_their_marker_is_reported_and_profiled(
    tmp_path: Path,
) -> None:
    """The processes a file's tests start are measured (a child holding 300 MiB), written to the
    profile, and compared with the file's marker; a process started earlier is not counted."""
    seen = _in_a_fresh_process("_outgrowing_file", tmp_path)
    assert seen["before_end"] is None  # not the file's end yet
    assert seen["note"] is not None and "more than its memory marker's 0.1 GiB" in seen["note"]
    record = seen["record"]
    assert record["file"] == "tests/heavy.py" and record["declared_gib"] == 0.1
    assert 0.28 <= record["peak_gib"] < 0.5  # the new child's 300 MiB, not the earlier one's
    # the file's reservation given back; the earlier process, still running, is kept reserved
    assert [(entry["gib"], entry["lasting"]) for entry in seen["ledger"]] == [(0.5, True)]


def _stack_kept_between_files(folder: Path) -> dict[str, Any]:
    """A first file starts a 300 MiB stack and leaves it running; the second replaces it with a
    100 MiB one."""
    memory.LEDGER = folder / "ledger.json"
    memory.SAMPLE_SECONDS = 0.1
    files = memory.FileMemory({"tests/first.py": 2.0, "tests/second.py": 1.0}, None)
    files.enter("tests/first.py")
    stack = _allocating_child(300, folder / "stack")
    try:
        _wait_for(folder / "stack")
        files.leave("tests/first.py", "tests/second.py")
        after_first = json.loads(memory.LEDGER.read_text())
        files.enter("tests/second.py")
        stack.kill()
        stack.wait(timeout=60)
        stack = _allocating_child(100, folder / "smaller")
        _wait_for(folder / "smaller")
        files.leave("tests/second.py", "tests/third.py")
        after_second = json.loads(memory.LEDGER.read_text())
    finally:
        stack.kill()
        stack.wait(timeout=60)
    assert files.lasting is not None
    return {"after_first": after_first, "after_second": after_second,
            "lasting": files.lasting.gib}  # fmt: skip


def test_processes_kept_running_between_files_stay_reserved_at_their_size(
    tmp_path: Path,
) -> None:
    """A package fixture's stack, started by one file and shared by the next, stays in the
    ledger at its size measured after each file, replaced rather than added up: the next file
    stops it and starts a smaller one."""
    seen = _in_a_fresh_process("_stack_kept_between_files", tmp_path)
    # 300 MiB, then 100 MiB, in steps of 0.25 GiB; the files' own reservations given back
    assert [(entry["gib"], entry["lasting"]) for entry in seen["after_first"]] == [(0.5, True)]
    assert [(entry["gib"], entry["lasting"]) for entry in seen["after_second"]] == [(0.25, True)]
    assert seen["lasting"] == 0.25


def test_processes_kept_running_do_not_hold_a_file_back_for_ever(
    tmp_path: Path, budget: float, no_wait: None
) -> None:
    """Other suites' stacks, kept until their suites end, fill the budget: a file waits only
    for other files, and runs once none holds a reservation."""
    ledger = tmp_path / "ledger.json"
    holder = _holder(ledger, 3.0, hold=600, ready=tmp_path / "ready", lasting=True)
    try:
        mine = memory.reserve(2.0, "this file", ledger=ledger)  # raises if it had to wait
    finally:
        holder.kill()
        holder.wait(timeout=60)
    memory.release(mine, ledger=ledger)
