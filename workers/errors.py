"""Errors raised by the worker layer, under ``certbench.errors.CertbenchError``."""

from __future__ import annotations

from certbench.errors import CertbenchError


class WorkerError(CertbenchError):
    """Base of worker-side errors."""


class WorkerConfigError(WorkerError):
    """Worker settings are inconsistent (time limits, lease, broker, device)."""


class ShardCancelled(WorkerError):
    """Raised from a stage's progress callback to stop a shard its submission no longer wants.

    ``outcome`` says why, as the task's outcome and the shard's history record it:
    ``cancelled`` (by its owner or an admin), ``failed`` (by the watchdog or another shard),
    ``finished_elsewhere`` (another worker recorded it), ``taken_over`` (this worker's claim
    lapsed and the shard went to another one) or ``stopped`` (any other state).
    """

    def __init__(self, message: str, *, outcome: str = "stopped") -> None:
        super().__init__(message)
        self.outcome = outcome
