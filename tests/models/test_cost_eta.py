"""The ETA in the entry's own cost (issue 33 §3): intake stores the network's FLOPs per sample,
this fleet's recorded shards give a FLOP rate beside their samples per second, and each
submission's ETA and estimate divide that rate by its own network's FLOPs per sample
(``models.runs.estimates.for_network``), so a network ten times heavier than those measured is
given ten times the time; a submission from before FLOPs were counted keeps the samples rate.
Through REST: ``tests/api/test_api_cost_eta.py``."""

from __future__ import annotations

import pytest

from models.runs.estimates import Rate, for_network


def test_a_rate_is_scaled_only_where_both_flop_figures_are_known():
    counted = Rate(100.0, 5.0, "measured", flops_per_second=1e9)
    plain = Rate(100.0, 5.0, "measured")
    scaled = for_network({"a": counted, "b": plain}, 10**8)
    assert scaled["a"].samples_per_second == pytest.approx(10.0)
    assert scaled["a"].images_per_second == pytest.approx(0.5)
    assert "1 GFLOP/s, over this network's 100,000,000 FLOPs per sample" in scaled["a"].basis
    assert scaled["b"] == plain
    assert for_network({"a": counted}, None) == {"a": counted}
