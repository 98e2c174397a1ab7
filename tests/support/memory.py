"""Memory the processes that tests start may hold at once, shared by every suite on the machine.

Why: each service process a test starts (``certbench serve``, a worker and its pool, a fleet
host, a CLI command) loads torch and holds about 0.4 to 0.6 GiB of its own memory. One quiet
suite peaked at 13.4 GiB used of the 2-core reference machine's 23.5 GiB, with its three test
processes in files that start a stack, a fleet or the README's first run at once. Two suites
started together beside ``certbench serve`` reached the same files at the same moment, the
kernel's OOM killer killed a test process in each, and both failed.

So a test file whose tests start such processes declares, with the ``memory`` marker, the most
they hold at once (``pytest.mark.memory(gib=...)``; measured with
``CERTBENCH_TEST_MEMORY_PROFILE``, below). Before its first test, the test process reserves that
much in a ledger in the temporary folder that every suite on the machine shares, and waits while
the reservations of all suites would pass the budget; it gives the reservation back after the
file's last test. The budget is a fixed share of the machine's memory (``BUDGET_SHARE``; the
rest is left to the test processes themselves, the local servers, a running ``certbench
serve`` and the page cache) or ``CERTBENCH_TEST_MEMORY_GIB``. Processes kept running from one
file to the next (the end-to-end stack, a package fixture; Chromium) stay reserved at their
measured size. A file's reservation is always granted when no other file holds one, so a file
heavier than what is left still runs, alone. A reservation whose test process has died (killed,
say) no longer counts.

``CERTBENCH_TEST_MEMORY_PROFILE=<file>`` appends, for every test file, the peak memory of the
processes its tests started (the sum of their proportional anonymous and shared memory, sampled
every ``SAMPLE_SECONDS``) and its declared reservation, as JSON lines: how the markers'
figures were measured, and how to re-measure them. Without it, files with a marker are sampled
all the same and a file whose processes outgrow their declaration is reported in the summary.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from models.submissions.storage import write_atomic
from tests.support import timing

GIB = 1024**3
#: The share of the machine's memory the reservations of all suites may add up to. On the
#: reference machine (23 GiB), two suites' six test processes (about 0.8 GiB each of their
#: own), a running ``certbench serve`` with its embedded worker, control consumer and pool
#: (about 2.5 GiB), the local servers and the libraries' pages hold about 9 GiB besides the
#: processes that tests start; 0.5 leaves 11.5 GiB for those and 2.5 GiB of slack.
BUDGET_SHARE = 0.5
LEDGER = Path(tempfile.gettempdir()) / "certbench-test-memory.json"
#: Processes kept running between files are reserved in steps of this many GiB.
LEFT_RUNNING_STEP = 0.25
#: How often the processes of a running file are measured.
SAMPLE_SECONDS = 1.0
#: How long a file waits for the others' reservations, on the reference machine (stretched by
#: the time scale): the heaviest files take two to three minutes, and a second suite may hold
#: several of them.
WAIT_SECONDS = 1800


@dataclass(frozen=True)
class Reservation:
    """Memory held by one test process (``pid``, started at ``start_ticks``) for one file, or,
    ``lasting``, for the processes it keeps running between files (package and session
    fixtures)."""

    pid: int
    start_ticks: int
    gib: float
    what: str
    lasting: bool = False


def budget_gib() -> float:
    """``CERTBENCH_TEST_MEMORY_GIB``, else BUDGET_SHARE of the machine's memory."""
    configured = os.environ.get("CERTBENCH_TEST_MEMORY_GIB")
    if configured:
        try:
            value = float(configured)
        except ValueError:
            raise ValueError(
                f"CERTBENCH_TEST_MEMORY_GIB must be a number of GiB, got {configured!r}"
            ) from None
        if value <= 0:
            raise ValueError(f"CERTBENCH_TEST_MEMORY_GIB must be positive, got {value}")
        return value
    return BUDGET_SHARE * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB


def describe() -> str:
    """pytest's header line: the budget and where it comes from."""
    source = (
        "CERTBENCH_TEST_MEMORY_GIB"
        if os.environ.get("CERTBENCH_TEST_MEMORY_GIB")
        else f"{BUDGET_SHARE:g} of this machine's memory"
    )
    return (
        f"memory for the processes tests start: {budget_gib():.1f} GiB ({source}), shared by "
        f"every suite on this machine (ledger {LEDGER})"
    )


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), which
    tells a live reservation from a reused process number; None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # the command name (field 2) is in parentheses and may hold spaces
    return int(stat.rsplit(")", 1)[1].split()[19])


def _alive(reservation: Reservation) -> bool:
    return _start_ticks(reservation.pid) == reservation.start_ticks


@contextlib.contextmanager
def _ledger(path: Path) -> Iterator[list[Reservation]]:
    """The live reservations, under an exclusive lock; written back when the block ends."""
    lock = path.with_suffix(".lock")
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            text = path.read_text() if path.exists() else ""
            entries = [Reservation(**entry) for entry in json.loads(text)] if text else []
            live = [entry for entry in entries if _alive(entry)]
            yield live
            # atomic: a test process killed mid-write must not leave every suite a torn ledger
            write_atomic(path, json.dumps([asdict(entry) for entry in live]).encode())
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def reserve(gib: float, what: str, *, ledger: Path | None = None) -> Reservation:
    """Wait until ``gib`` fits in the budget beside every suite's reservations, then hold it.

    Raises TimeoutError after WAIT_SECONDS (scaled), naming who holds the budget.
    """
    ledger = ledger or LEDGER
    start = _start_ticks(os.getpid())
    assert start is not None
    mine = Reservation(pid=os.getpid(), start_ticks=start, gib=gib, what=what)
    budget = budget_gib()
    limit = timing.seconds(WAIT_SECONDS)
    deadline = time.monotonic() + limit
    while True:
        with _ledger(ledger) as live:
            held = sum(entry.gib for entry in live)
            # alone among files: the lasting reservations of processes kept between files may
            # never all end before their suites do
            alone = not any(not entry.lasting for entry in live)
            if alone or held + gib <= budget:
                live.append(mine)
                return mine
        if time.monotonic() > deadline:
            holders = ", ".join(f"{e.what} ({e.gib:g} GiB, pid {e.pid})" for e in live)
            raise TimeoutError(
                f"waited {limit:.0f} s for {gib:g} GiB of the tests' {budget:.1f} GiB memory "
                f"budget ({what}); held by {holders}. Raise CERTBENCH_TEST_MEMORY_GIB if this "
                "machine has memory to spare, or run fewer suites at once."
            )
        time.sleep(1.0)


def release(
    *reservations: Reservation | None, keep: float = 0.0, ledger: Path | None = None
) -> Reservation | None:
    """Give ``reservations`` back; with ``keep`` > 0, hold that much instead, without waiting,
    as this process's lasting reservation (the memory of processes still running, already
    allocated), which it returns."""
    start = _start_ticks(os.getpid())
    assert start is not None
    kept = None
    if keep > 0:
        what = "processes kept running between files (package and session fixtures)"
        kept = Reservation(os.getpid(), start, keep, what, lasting=True)
    with _ledger(ledger or LEDGER) as live:
        live[:] = [entry for entry in live if entry not in reservations]
        if kept is not None:
            live.append(kept)
    return kept


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return found
    for task in tasks:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            found += [int(p) for p in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return found


def descendants(pid: int, *, besides: frozenset[int] = frozenset()) -> list[int]:
    """Every process below ``pid`` (children, their children, ...), leaving out the processes
    in ``besides`` and everything below them."""
    found: list[int] = []
    frontier = [pid]
    while frontier:
        kids = [kid for parent in frontier for kid in _children(parent) if kid not in besides]
        found += kids
        frontier = kids
    return found


def private_bytes(pid: int) -> int:
    """The process's proportional share of anonymous and shared memory (``smaps_rollup``'s
    Pss_Anon + Pss_Shmem): what it adds to the machine's use, not counting the libraries' file
    pages, which the page cache holds once for every process."""
    total = 0
    try:
        lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return 0
    for line in lines:
        key, _, rest = line.partition(":")
        if key in ("Pss_Anon", "Pss_Shmem"):
            total += int(rest.split()[0]) * 1024
    return total


class PeakSampler:
    """Samples, in a thread, the memory of the processes this process starts from now on (and
    of theirs); ``peak`` in GiB."""

    def __init__(self, interval: float | None = None) -> None:
        self.interval = interval or SAMPLE_SECONDS
        self.peak = 0.0
        # the processes already running (the test process's Chromium, shared by every file that
        # browses, and its renderers) are not this file's
        self._before = frozenset(descendants(os.getpid()))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.wait(self.interval):
            mine = descendants(me, besides=self._before)
            used = sum(private_bytes(pid) for pid in mine) / GIB
            self.peak = max(self.peak, used)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak


def held_by_descendants() -> float:
    """GiB held now by every process below this one."""
    return sum(private_bytes(pid) for pid in descendants(os.getpid())) / GIB


@dataclass
class _Running:
    name: str
    declared: float
    reservation: Reservation | None
    sampler: PeakSampler
    started: float


class FileMemory:
    """One test process's side: reserves each file's declared memory before its first test and
    gives it back after its last, measuring what the file's processes held meanwhile.

    Processes kept running between files stay reserved at their size measured after each
    file: the end-to-end stack is a package fixture, started by the first file of ``tests/e2e``
    that asks for it and shared by the next ones, which do not count it again, and Chromium is
    one per test process.
    """

    def __init__(self, weights: dict[str, float], profile: Path | None) -> None:
        self.weights = weights
        self.profile = profile
        self._running: _Running | None = None
        #: the processes kept running between files, as measured after the last file
        self.lasting: Reservation | None = None

    def enter(self, name: str) -> None:
        """Before a test of file ``name``: the file's reservation, unless already held."""
        if self._running is not None and self._running.name == name:
            return
        declared = self.weights.get(name, 0.0)
        if not declared and self.profile is None:
            return
        reservation = reserve(declared, name) if declared else None
        self._running = _Running(name, declared, reservation, PeakSampler(), time.monotonic())

    def leave(self, name: str, next_name: str | None) -> str | None:
        """After a test of ``name`` whose successor is in ``next_name``: at the file's end, its
        reservation given back; returns a note when its processes outgrew their declaration."""
        running = self._running
        if running is None or running.name != name or next_name == name:
            return None
        self._running = None
        peak = running.sampler.stop()
        left = held_by_descendants()
        keep = math.ceil(left / LEFT_RUNNING_STEP) * LEFT_RUNNING_STEP if left >= 0.05 else 0
        self.lasting = release(running.reservation, self.lasting, keep=keep)
        if self.profile is not None:
            record = {"file": name, "declared_gib": running.declared, "peak_gib": round(peak, 2),
                      "left_running_gib": round(left, 2),
                      "seconds": round(time.monotonic() - running.started, 1)}  # fmt: skip
            with self.profile.open("a") as handle:
                handle.write(json.dumps(record) + "\n")
        if running.declared and peak > running.declared:
            return (
                f"{name}: the processes its tests started held {peak:.2f} GiB at once, more than "
                f"its memory marker's {running.declared:g} GiB (tests/support/memory.py); "
                "raise the marker"
            )
        return None
