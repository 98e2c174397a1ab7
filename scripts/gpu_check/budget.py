"""A wall-clock budget: sections that would overrun it are skipped and say so."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Budget:
    """Seconds left of ``total``; :meth:`run` skips a section whose estimate does not fit."""

    total: float
    started: float = field(default_factory=time.perf_counter)
    skipped: list[str] = field(default_factory=list)

    def left(self) -> float:
        return self.total - (time.perf_counter() - self.started)

    def run(self, name: str, needs: float, fn: Callable[[], Any]) -> Any:
        """``fn()``, or None (recorded in :attr:`skipped`) when fewer than ``needs`` seconds are
        left. Errors are not caught: a broken section must fail the check, not vanish."""
        if self.left() < needs:
            self.skipped.append(f"{name} (needs ~{needs:.0f} s, {self.left():.0f} s left)")
            return None
        return fn()
