"""Errors raised by the worker layer, under ``certbench.errors.CertbenchError``."""

from __future__ import annotations

from certbench.errors import CertbenchError


class WorkerError(CertbenchError):
    """Base of worker-side errors."""


class WorkerConfigError(WorkerError):
    """Worker settings are inconsistent (time limits, lease, broker, device)."""


class ShardCancelled(WorkerError):
    """Raised from certify's per-record callback to stop a shard whose submission was cancelled."""
