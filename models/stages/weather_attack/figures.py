"""The worst-case weather stage's figures: its leaderboard columns and REST fields with their help
texts (citing Wang et al., ``PAPER``), and their values from the merged records' summaries
(``certbench.weather.records.summarize_weather``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from models.stages.base import MetricSpec
from models.stages.weather_attack.protocol import PAPER

if TYPE_CHECKING:
    from certbench.weather import WeatherSummary

#: metric key → flat figure of ``certbench.weather.records.summarize_weather`` (kind, name).
FIGURES = {
    "weather_worst_rain": ("base", "worst_case_accuracy_rain"),
    "weather_worst_snow": ("base", "worst_case_accuracy_snow"),
    "weather_worst": ("base", "worst_case_accuracy"),
    "weather_random_rain": ("base", "random_accuracy_rain"),
    "weather_random_snow": ("base", "random_accuracy_snow"),
    "weather_cert_acc_000": ("smoothed", "attacked_certified_accuracy_0"),
    "weather_cert_acc_025": ("smoothed", "attacked_certified_accuracy_0.25"),
    "weather_acr": ("smoothed", "attacked_acr"),
}


def leaderboard_metrics(summaries: Mapping[str, WeatherSummary]) -> dict[str, float | None]:
    """The stage's leaderboard figures (None where the protocol did not measure them);
    ``weather_random`` is the mean random-weather accuracy over every set."""
    out: dict[str, float | None] = {}
    for key, (kind, figure) in FIGURES.items():
        summary = summaries.get(kind)
        out[key] = None if summary is None else summary.figures.get(figure)
    rows = summaries["base"].rows
    out["weather_random"] = sum(r["random_accuracy"] for r in rows) / len(rows)
    return out


def weather_metric_specs(protocol: Mapping[str, Any]) -> list[MetricSpec]:
    """Worst-case accuracy per weather and random-weather accuracy (base classifier);
    certified accuracy at r = 0 and 0.25 and ACR under attacked weather (smoothed)."""
    weathers = protocol.get("weathers", ("rain", "snow"))
    base = "base classifier (not smoothed)"
    specs = [
        MetricSpec(
            f"weather_worst_{weather}",
            f"worst-case {weather}",
            f"accuracy of the {base} under the simulation attack on {weather}: an image "
            f"counts only if no restart's weather fools it; mean over severities ({PAPER})",
            group="weather",
        )
        for weather in ("rain", "snow")
        if weather in weathers
    ]
    specs.append(
        MetricSpec(
            "weather_random",
            "random weather",
            f"accuracy of the {base} on the random weather draw of the same images, mean "
            f"over weathers and severities; its gap to worst-case accuracy is how much "
            f"random weather over-estimates robustness ({PAPER})",
            group="weather",
        )
    )
    specs += [
        MetricSpec(
            f"weather_random_{weather}",
            f"random {weather}",
            f"accuracy of the {base} on random {weather}, mean over severities ({PAPER})",
            group="weather",
            column=False,
        )
        for weather in ("rain", "snow")
        if weather in weathers
    ]
    specs.append(
        MetricSpec(
            "weather_worst",
            "worst-case weather",
            f"worst-case accuracy of the {base}, mean over every weather and severity ({PAPER})",
            group="weather",
            column=False,
        )
    )
    if protocol.get("smoothed", True):
        smoothed = "of the smoothed classifier on weather attacked by a SmoothAdv-style "
        smoothed += f"simulation attack, certified with CERTIFY ({PAPER})"
        specs += [
            MetricSpec(
                "weather_cert_acc_000",
                "attacked r = 0",
                f"certified accuracy at radius 0 {smoothed}",
                group="weather",
            ),
            MetricSpec(
                "weather_cert_acc_025",
                "attacked r = 0.25",
                f"certified accuracy at ℓ2 radius 0.25 {smoothed}",
                group="weather",
            ),
            MetricSpec(
                "weather_acr",
                "attacked ACR",
                f"average certified radius {smoothed}",
                "radius",
                group="weather",
            ),
        ]
    return specs
