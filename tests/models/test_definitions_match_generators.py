"""The packaged benchmark definitions name exactly the configs our generators write."""

from __future__ import annotations

import pytest

from generators.cifar_f import grid
from generators.corruption_sets import config_name
from generators.corruptions_c import CIFAR_C
from generators.corruptions_cbar import CIFAR_CBAR
from generators.weather import benchmark_spec as weather_benchmark
from models.catalog.benchmarks import packaged_definitions

SEVERITIES = range(1, 6)

EXPECTED = {
    "f": {spec.name for spec in grid()},
    "c": {config_name(c, s) for c in CIFAR_C for s in SEVERITIES},
    "c-bar": {config_name(c, s) for c in CIFAR_CBAR for s in SEVERITIES},
    "weather": {config_name(w, s) for w in weather_benchmark().names for s in SEVERITIES},
}


@pytest.mark.parametrize("dataset", ["cifar10", "cifar100"])
@pytest.mark.parametrize("suite", sorted(EXPECTED))
def test_definition_configs_are_generator_configs(dataset: str, suite: str) -> None:
    definitions = {d.name: d for d in packaged_definitions()}
    definition = definitions[f"{dataset}-{suite}"]
    assert {t.config for t in definition.test_sets} == EXPECTED[suite]
    assert len(EXPECTED[suite]) == {"f": 192, "c": 75, "c-bar": 50, "weather": 10}[suite]
    # `certbench publish out/<dataset>-<suite> --repo certbench/<dataset>-<suite>`
    assert {t.repo for t in definition.test_sets} == {f"certbench/{dataset}-{suite}"}
