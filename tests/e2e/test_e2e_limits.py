"""The end-to-end stacks' shard limits stretch with the machine's load, in the worker's order
(soft < hard < visibility timeout), while the lease they are staged against stays."""

from __future__ import annotations

import pytest

from tests.support import timing
from tests.support.e2e import SCALED_LIMITS, SERVICE_ENV, shard_limits


def test_a_loaded_machine_stretches_the_shard_limits_but_not_the_lease(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(timing, "factor", lambda: 3.0)
    limits = {name: int(value) for name, value in shard_limits().items()}
    soft, hard, visibility = (limits[name] for name in SCALED_LIMITS)
    assert (soft, hard, visibility) == (90, 120, 135)
    assert "CERTBENCH_LEASE_SECONDS" not in limits
    assert int(SERVICE_ENV["CERTBENCH_LEASE_SECONDS"]) < soft < hard < visibility


def test_a_quiet_machine_keeps_them_as_written(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(timing, "factor", lambda: 1.0)
    assert shard_limits() == {name: SERVICE_ENV[name] for name in SCALED_LIMITS}
