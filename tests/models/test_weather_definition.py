"""The ``weather_attack`` definition block: validation, the stored row, units, leaderboard
metrics, and the packaged weather benchmarks."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from certbench.weather.simulator import WEATHERS
from models.catalog.benchmarks import packaged_definitions, parse_definition, upsert_benchmark
from models.core.errors import BenchmarkDefinitionError
from models.core.settings import Settings
from models.db.states import SubmissionState
from models.stages import registry
from models.stages.weather_attack.protocol import (
    STAGE,
    Weather,
    WeatherAttackProtocol,
    parse_unit,
    unit_name,
)
from models.stages.work import WorkItem
from tests.support.service_factories import tiny_definition


def _doc(block: dict[str, Any], *, seed: int | None = None) -> dict[str, Any]:
    doc = tiny_definition()
    if seed is not None:
        doc["protocol"]["seed"] = seed
    doc["stages"] = {STAGE: {"repo": "local/tiny"} | block}
    return doc


def _item(row: dict[str, Any]) -> WorkItem:
    return WorkItem(
        submission_id=1, state=SubmissionState.RUNNING, attempt=1, benchmark="tiny",
        num_classes=10, sigma=0.25, n0=4, n=16, alpha=0.001, seed=0, protocol_version="v",
        manifest={}, weights_path=None, test_sets=(), stages={STAGE: row},
    )  # fmt: skip


def test_the_block_is_stored_with_its_subset_seed_and_certify_protocol(session: Session):
    block = {"folder": "/data/x", "source_size": 9, "skip": 2, "severities": [3, 1],
             "examples": 10}  # fmt: skip
    benchmark = upsert_benchmark(session, parse_definition(json.dumps(_doc(block, seed=5))))
    row = benchmark.stages[STAGE]
    assert (row["subset_skip"], row["subset_limit"], row["num_images"]) == (2, None, 5)
    assert row["seed"] == 5  # the random weather sets' seed defaults to the benchmark's
    assert row["examples"] == 5  # at most the images attacked
    assert row["severities"] == [1, 3] and row["weathers"] == ["rain", "snow"]
    assert row["certify"] == {"n0": 4, "n": 16, "alpha": 0.001}
    assert (row["steps"], row["restarts"], row["smoothed"], row["noise_samples"]) == (
        10, 5, True, 8,
    )  # fmt: skip
    assert row["folder"] == "/data/x"
    explicit = parse_definition(json.dumps(_doc({"seed": 3}, seed=5)))
    assert registry.get(STAGE).protocol_row(explicit.stage_block(STAGE), explicit)["seed"] == 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"weathers": ["fog"]}, "weathers"),
        ({"weathers": []}, "weathers"),
        ({"weathers": ["rain", "rain"]}, "twice"),
        ({"severities": [0]}, "severities"),
        ({"severities": [6]}, "severities"),
        ({"severities": [2, 2]}, "twice"),
        ({"restarts": 0}, "restarts"),
        ({"steps": -1}, "steps"),
        ({"noise_samples": 0}, "noise_samples"),
        ({"examples": 17}, "examples"),
        ({"truncation": 0}, "truncation"),
        ({"seed": -1}, "seed"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_invalid_weather_blocks(change: dict, message: str):
    with pytest.raises(BenchmarkDefinitionError, match=message):
        parse_definition(json.dumps(_doc(change)))


def test_the_block_knows_exactly_the_simulators_weathers():
    assert typing.get_args(Weather) == WEATHERS


def test_units_per_weather_severity_and_classifier():
    block = {"source_size": 6, "severities": [2, 4], "examples": 2}
    definition = parse_definition(json.dumps(_doc(block)))
    stage = registry.get(STAGE)
    row = stage.protocol_row(definition.stage_block(STAGE), definition)
    settings = Settings(data_dir=Path("/nonexistent"))
    units = stage.units(_item(row), settings)
    assert [(u.name, u.num_images) for u in units] == [
        ("rain-2", 3), ("rain-4", 3), ("snow-2", 3), ("snow-4", 3),
        ("smoothed-rain-2", 3), ("smoothed-rain-4", 3), ("smoothed-snow-2", 3),
        ("smoothed-snow-4", 3), ("examples", 2),
    ]  # fmt: skip
    assert all(parse_unit(unit_name(*parse_unit(u.name))) == parse_unit(u.name)
               for u in units[:-1])  # fmt: skip
    lean = row | {"smoothed": False, "examples": 0, "weathers": ["snow"]}
    assert [u.name for u in stage.units(_item(lean), settings)] == ["snow-2", "snow-4"]


def test_metric_specs_follow_the_protocol_and_name_the_paper():
    stage = registry.get(STAGE)
    every = {s.key for s in stage.all_metric_specs()}
    assert every == {
        "weather_worst_rain", "weather_worst_snow", "weather_random", "weather_random_rain",
        "weather_random_snow", "weather_worst", "weather_cert_acc_000", "weather_cert_acc_025",
        "weather_acr",
    }  # fmt: skip
    assert every <= set(registry.metric_keys())  # sortable
    assert all("openreview.net/forum?id=Q69Aj3P0PtV" in s.help for s in stage.all_metric_specs())
    columns = [s.key for s in stage.all_metric_specs() if s.column]
    assert columns == [
        "weather_worst_rain", "weather_worst_snow", "weather_random", "weather_cert_acc_000",
        "weather_cert_acc_025", "weather_acr",
    ]  # fmt: skip
    rain_base = stage.metric_specs({"weathers": ["rain"], "smoothed": False}, test_sets=1, bands=())
    assert [s.key for s in rain_base if s.column] == ["weather_worst_rain", "weather_random"]
    assert stage.metric_specs(None, test_sets=1, bands=()) == []


@pytest.mark.parametrize("base", ["cifar10", "cifar100"])
def test_packaged_weather_benchmarks_attack_the_clean_subset(base: str):
    definition = {d.name: d for d in packaged_definitions()}[f"{base}-weather"]
    block = definition.stage_block(STAGE)
    assert isinstance(block, WeatherAttackProtocol)
    assert block.repo == f"uoft-cs/{base}" and block.config is None
    assert block.subset(definition.protocol) == (20, None, 500)
    assert (block.weathers, block.severities) == (["rain", "snow"], [1, 2, 3, 4, 5])
    assert (block.steps, block.restarts, block.smoothed) == (10, 5, True)  # the paper's PGD-10
    assert block.seed is None and definition.protocol.seed == 0  # `generate weather --seed 0`
    sets = [(t.attributes["corruption"], t.attributes["severity"]) for t in definition.test_sets]
    assert sets == [(w, s) for w in ("rain", "snow") for s in range(1, 6)]
