"""The cost of certifying an entry (issue 33 §3; ``models.stages.certification.cost``): FLOPs
per certified image are (n0 + n) × FLOPs per sample, device-seconds per image the shards'
seconds over their images, and pages print both with units."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from api.web.rendering import NBSP, _flops, _metric, _seconds
from models.stages.base import UnitResult
from models.stages.certification.cost import cost_metrics, device_types, throughput


def result(count: int, seconds: float) -> UnitResult:
    return UnitResult(unit="u", summary={}, records_path="r", count=count, seconds=seconds)


def test_costs_per_image_at_the_benchmarks_n():
    item = SimpleNamespace(n0=100, n=1_000)
    metrics = cost_metrics(item, [result(91, 45.5), result(9, 4.5)], 650_000)  # type: ignore[arg-type]
    assert metrics == {"seconds_per_image": 0.5, "flops_per_image": 650_000 * 1_100}
    assert cost_metrics(item, [result(3, 0.0)], 1)["seconds_per_image"] is None  # type: ignore[arg-type]


def test_throughput_and_devices_as_the_shards_recorded_them():
    assert throughput(count=10, seconds=4.0, samples_per_image=200, devices=["cuda"]) == {
        "samples_per_second": 500.0, "devices": ["cuda"],
    }  # fmt: skip
    assert (
        throughput(count=10, seconds=0.0, samples_per_image=200, devices=[])["samples_per_second"]
        is None
    )
    shards = [{"device_type": "cuda"}, {"device_type": "cpu"}, {"device_type": "cuda"}, {}]
    assert device_types(shards) == ["cpu", "cuda"]


@pytest.mark.parametrize(
    ("value", "text"),
    [(7.15e8, "715 MFLOP"), (5.93e10, "59.3 GFLOP"), (1.2e15, "1.2 PFLOP"), (None, "–")],
)
def test_flops_print_with_an_si_prefix(value, text):
    assert _flops(value) == text.replace(" ", NBSP) == _metric(value, "flops")


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.0123, "12.3 ms"), (0.5, "500 ms"), (4.2, "4.2 s"), (12_500.0, "12,500 s")],
)
def test_seconds_print_with_a_unit(value, text):
    assert _seconds(value) == text.replace(" ", NBSP) == _metric(value, "seconds")


def test_the_aggregation_reuses_the_figure_intake_stored():
    """The FLOPs counted at intake are the entry's; only a submission made before intake counted
    them (NULL) is counted again, to the same figures."""
    from models.stages.certification.cost import network_figures
    from tests.support.service_factories import manifest

    counted = network_figures(manifest())
    assert counted["parameters"] > 0 and counted["flops_per_sample"] > 0
    assert network_figures(manifest(), counted["flops_per_sample"]) == counted
    assert network_figures(manifest(), 12_345) == {
        "parameters": counted["parameters"], "flops_per_sample": 12_345,
    }  # fmt: skip
