"""The worst-case weather section's table (per weather × severity, means, gap) and panels, from
stored stage results as the REST API serves them. The full page is rendered by
tests/workers/test_worker_weather.py on a real finished submission."""

from __future__ import annotations

from typing import Any

import pytest

from api.schemas.result import ResultsPublic, StageResultPublic
from api.web.stages import weather_attack as section
from models.db.states import SubmissionState


def _result(unit: str, kind: str, weather: str, severity: int, **summary: Any) -> Any:
    return StageResultPublic(
        stage=section.STAGE,
        unit=unit,
        summary={"kind": kind, **summary},
        protocol={
            "weathers": ["snow", "rain"],
            "perturbation_set": {"weather": weather, "severity": severity},
        },
        seeds={},
        data_hashes={},
        count=4,
        seconds=1.5,
        evaluator_version="x",
    )


def _results(stages: list[Any]) -> ResultsPublic:
    return ResultsPublic(
        submission_id=9,
        benchmark="b",
        model_name="m",
        state=SubmissionState.FINISHED,
        protocol_version="v",
        manifest={},
        summary=None,
        results=[],
        stages=stages,
    )


def test_rows_follow_the_protocol_order_with_means_and_gaps() -> None:
    stages = [
        _result("rain-1", "base", "rain", 1, images=4, random_accuracy=0.75,
                worst_case_accuracy=0.5),
        _result("rain-2", "base", "rain", 2, images=4, random_accuracy=0.5,
                worst_case_accuracy=0.0),
        _result("snow-3", "base", "snow", 3, images=4, random_accuracy=1.0,
                worst_case_accuracy=0.25),
        _result("smoothed-rain-1", "smoothed", "rain", 1, acr=0.2,
                **{"certified_accuracy_0": 0.5, "certified_accuracy_0.25": 0.25}),
        _result("smoothed-rain-2", "smoothed", "rain", 2, acr=0.1,
                **{"certified_accuracy_0": 0.25, "certified_accuracy_0.25": 0.0}),
    ]  # fmt: skip
    rows = section.context(_results(stages))["weather_rows"]
    assert [(r.weather, r.severity) for r in rows] == [
        ("snow", 3), ("rain", 1), ("rain", 2), ("rain", None),
    ]  # fmt: skip
    snow, mean = rows[0], rows[-1]
    assert (snow.gap, snow.cert_0, snow.acr) == (0.75, None, None)  # snow not smoothed
    assert (mean.random, mean.worst, mean.gap) == (0.625, 0.25, 0.375)
    assert (mean.cert_0, mean.cert_025, mean.acr) == pytest.approx((0.375, 0.125, 0.15))


def test_panels_link_to_the_stage_file_route_and_absent_results_give_no_section() -> None:
    stored = {
        "weather": "rain",
        "severity": 5,
        "file": "examples-rain-5.png",
        "images": [{"index": 0, "label": 1, "random_prediction": 1, "attacked_prediction": 2}],
    }
    examples = StageResultPublic(
        stage=section.STAGE,
        unit="examples",
        summary={
            "kind": "examples",
            "files": {"examples-rain-5.png": "records/9/_weather_attack/examples-rain-5.png"},
            "panels": [stored],
        },
        protocol={},
        seeds={},
        data_hashes={},
        count=1,
        seconds=0.5,
        evaluator_version="x",
    )
    base = _result("rain-5", "base", "rain", 5, images=4, random_accuracy=1.0,
                   worst_case_accuracy=1.0)  # fmt: skip
    context = section.context(_results([base, examples]))
    [panel] = context["weather_panels"]
    assert panel.url == "/models/9/files/weather_attack/examples-rain-5.png"
    assert panel.images[0]["attacked_prediction"] == 2
    # labelled by test position (every skip-th source image), not by source index
    skipped = section.panels(9, [examples], skip=4)[0].images
    stored["images"][0]["index"] = 12
    assert section.panels(9, [examples], skip=4)[0].images[0]["position"] == 3
    assert skipped[0]["position"] == 0
    assert context["weather_seconds"] == 2.0 and not context["weather_smoothed"]
    assert section.context(_results([])) == {}
