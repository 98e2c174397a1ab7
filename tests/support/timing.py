"""How long a test may wait for something to happen, on this machine.

The waits of the suite (a worker finishing a submission, a server answering, a browser drawing a
figure) are deadlines sized on a quiet 2-core machine. Beside ``certbench serve`` and a second
suite (load about 10 on 2 cores) everything takes several times longer, and fixed deadlines
failed tests that were only slow (issue 32: 51 minutes, 2 timeouts). So every deadline is
``seconds(base)``: ``base`` times a factor for the machine, which is

- ``CERTBENCH_TEST_TIME_SCALE`` when set (a positive number; ``1`` keeps the sizes as written);
- otherwise measured once per session (``tests/conftest.py``, in the controlling pytest process,
  handed to pytest-xdist's processes) as the larger of 1, the wall time of a fixed CPU loop over
  its time on the reference machine (slower or contended cores), and the 1-minute load average
  per CPU; and, for each wait, never below the load per CPU when the wait begins (a load that
  arrives during the session).

The factor only lengthens deadlines, so a passing test is never slower; a hung one fails later.
It is not applied to timings a test asserts as behaviour (a lease that must lapse, a client's own
time-out under test), nor to sleeps that make a condition happen.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import asdict, dataclass

#: The variable that fixes the factor (a positive number) instead of measuring it.
VARIABLE = "CERTBENCH_TEST_TIME_SCALE"

#: Iterations of the calibration loop: about 36 ms of one core on the reference machine.
CALIBRATION_ITERATIONS = 500_000

#: Seconds of the calibration loop on the machine the suite's deadlines were sized on (a 2-core
#: AMD EPYC virtual machine, CPython 3.11): the fastest of 20 runs with little else running.
#: (With both cores busy the loop's own CPU time grows too, to 0.060 s: its cores are hardware
#: threads that share a physical core, so only the quiet figure is a reference.)
REFERENCE_SECONDS = 0.036

#: The largest measured factor: a hung test still fails within ten times its deadline.
CEILING = 10.0


@dataclass(frozen=True)
class Scale:
    """The factor and what it was taken from (printed in pytest's header)."""

    factor: float
    source: str
    loop: float = 1.0
    load: float = 0.0

    def describe(self) -> str:
        if self.source == VARIABLE:
            return f"time scale {self.factor:g} (from {VARIABLE})"
        return (
            f"time scale {self.factor:g} (measured: CPU loop {self.loop:.2f}x its reference, "
            f"load {self.load:.2f} per CPU; {VARIABLE} overrides)"
        )

    def as_dict(self) -> dict[str, float | str]:
        """A plain dict, as pytest-xdist hands it to its processes."""
        return asdict(self)


def _calibration_loop() -> int:
    total = 0
    for i in range(CALIBRATION_ITERATIONS):
        total += i * i % 7
    return total


def calibration_ratio(runs: int = 3) -> float:
    """Median wall time of the calibration loop over REFERENCE_SECONDS."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        _calibration_loop()
        times.append(time.perf_counter() - started)
    return statistics.median(times) / REFERENCE_SECONDS


def load_per_cpu() -> float:
    """The 1-minute load average over the CPUs this process may run on."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return os.getloadavg()[0] / max(cpus or 1, 1)


def _bounded(value: float) -> float:
    """At least 1, at most CEILING, rounded up to a tenth."""
    return min(CEILING, max(1.0, math.ceil(value * 10) / 10))


def from_environment() -> Scale | None:
    """The factor CERTBENCH_TEST_TIME_SCALE fixes, or None when it is unset or empty."""
    text = os.environ.get(VARIABLE, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{VARIABLE} must be a positive number, not {text!r}")
    return Scale(factor=value, source=VARIABLE)


def measure() -> Scale:
    """The factor for this machine now: the variable if set, else the calibration and load."""
    fixed = from_environment()
    if fixed is not None:
        return fixed
    loop, load = calibration_ratio(), load_per_cpu()
    return Scale(factor=_bounded(max(loop, load)), source="measured", loop=loop, load=load)


_session: Scale | None = None


def configure(scale: Scale) -> None:
    """Use ``scale`` for this process (tests/conftest.py, at the start of the session)."""
    global _session
    _session = scale


def current() -> Scale:
    """This session's scale (measured now if no conftest configured one, e.g. in a script)."""
    if _session is None:
        configure(measure())
    assert _session is not None
    return _session


def factor() -> float:
    """The factor for a wait that begins now: the session's, or the load per CPU now if higher
    (unless CERTBENCH_TEST_TIME_SCALE fixes it)."""
    scale = current()
    if scale.source == VARIABLE:
        return scale.factor
    return max(scale.factor, _bounded(load_per_cpu()))


def seconds(base: float) -> float:
    """A deadline of ``base`` seconds on the reference machine, on this one."""
    return base * factor()


def milliseconds(base: float) -> float:
    """``seconds`` for the APIs that count in milliseconds (Playwright)."""
    return base * factor()
