"""How much longer than on a quiet machine the check's ceilings last (``--time-scale``).

The shard time limits, the client's request timeout and the check's own bounded waits are sized
for a quiet 2-core machine. On a loaded one (the test suite beside another suite and ``certbench
serve``, load ~30 on 2 cores) a 4-image smoke shard ran past its 120 s soft limit on both workers
and the run failed with ``time_limit``, and two of the client's requests took over its 30 s and
counted as "no answer": ceilings meant to catch a hung shard or a silent API caught a slow
machine. ``--time-scale`` stretches the ceilings only: the shard limits and the visibility
timeout, the request timeout, and the waits for a moment or a run's end. The lease, the heartbeat
and the fault's timing stay as set, since the faults are staged against them.
"""

from __future__ import annotations

_factor = 1.0


def set_factor(value: float) -> None:
    """Use ``value`` (at least 1) from now on."""
    global _factor
    if not value >= 1.0:
        raise ValueError(f"--time-scale must be a number of at least 1, got {value}")
    _factor = value


def factor() -> float:
    return _factor


def seconds(base: float) -> float:
    """A ceiling of ``base`` seconds on a quiet machine, on this one."""
    return base * _factor
