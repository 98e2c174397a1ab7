"""Web section of the worst-case weather stage on the model page (Wang et al., NeurIPS 2022 ML
Safety Workshop, https://openreview.net/forum?id=Q69Aj3P0PtV).

Per weather × severity: the base classifier's accuracy on random weather and under the
simulation attack, the gap between them (how much random weather over-estimates robustness),
and, when the smoothed classifier was attacked, its certified accuracy and ACR on the attacked
images; a bar chart of random vs worst-case accuracy; the paper's Fig. 1 panels (clean, random,
attacked, difference) served by ``/models/{id}/files/weather_attack/{name}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from api.schemas.result import ResultsPublic, StageResultPublic
from certbench.figures import Axis, Bars, Figure, bar_chart

STAGE = "weather_attack"
TEMPLATE = "stages/weather_attack.html"
FILE_URL = "/models/{submission_id}/files/" + STAGE + "/{name}"


@dataclass(frozen=True)
class WeatherRow:
    """One weather × severity (``severity`` None: the mean over the weather's severities)."""

    weather: str
    severity: int | None
    images: int | None
    random: float | None
    worst: float | None
    cert_0: float | None
    cert_025: float | None
    acr: float | None

    @property
    def gap(self) -> float | None:
        """Random − worst-case accuracy: the over-estimate of random-weather evaluation."""
        if self.random is None or self.worst is None:
            return None
        return self.random - self.worst


@dataclass(frozen=True)
class Panel:
    """A Fig. 1-style example panel: its URL and the images it shows (index, label, the base
    classifier's prediction on the random and on the attacked weather)."""

    weather: str
    severity: int
    url: str
    images: list[dict[str, int]]


def context(results: ResultsPublic) -> dict[str, Any]:
    """What the partial reads besides ``results``, ``benchmark`` and ``active``."""
    mine = [s for s in results.stages if s.stage == STAGE]
    attacks = [s for s in mine if s.summary.get("kind") in ("base", "smoothed")]
    if not attacks:
        return {}
    rows = weather_rows(attacks)
    protocol = attacks[0].protocol
    return {
        "weather_rows": rows,
        "weather_chart": weather_chart(rows),
        "weather_panels": panels(
            results.submission_id, mine, skip=int(attacks[0].protocol.get("subset_skip") or 1)
        ),
        "weather_protocol": protocol,
        "weather_certify": next(
            (s.protocol.get("certify") for s in attacks if s.summary["kind"] == "smoothed"), None
        ),
        "weather_smoothed": any(s.summary["kind"] == "smoothed" for s in attacks),
        "weather_images": max(s.count for s in attacks),
        "weather_seconds": sum(s.seconds for s in mine),
        "weather_evaluator": attacks[0].evaluator_version,
    }


def _set(result: StageResultPublic) -> tuple[str, int]:
    perturbation = result.protocol.get("perturbation_set", {})
    return str(perturbation["weather"]), int(perturbation["severity"])


def weather_rows(attacks: list[StageResultPublic]) -> list[WeatherRow]:
    """A row per set in the protocol's weather order, each weather followed by its mean over
    severities (when it has several)."""
    base = {_set(s): s.summary for s in attacks if s.summary["kind"] == "base"}
    smoothed = {_set(s): s.summary for s in attacks if s.summary["kind"] == "smoothed"}
    order = attacks[0].protocol.get("weathers") or sorted({w for w, _ in base})
    rows: list[WeatherRow] = []
    for weather in order:
        mine = []
        for key in sorted(k for k in base if k[0] == weather):
            b, s = base[key], smoothed.get(key, {})
            mine.append(
                WeatherRow(
                    weather=weather,
                    severity=key[1],
                    images=b.get("images"),
                    random=b.get("random_accuracy"),
                    worst=b.get("worst_case_accuracy"),
                    cert_0=s.get("certified_accuracy_0"),
                    cert_025=s.get("certified_accuracy_0.25"),
                    acr=s.get("acr"),
                )
            )
        rows += mine
        if len(mine) < 2:
            continue  # a mean of one severity repeats its row
        rows.append(
            WeatherRow(
                weather=weather,
                severity=None,
                images=None,
                random=_mean([r.random for r in mine]),
                worst=_mean([r.worst for r in mine]),
                cert_0=_mean([r.cert_0 for r in mine]),
                cert_025=_mean([r.cert_025 for r in mine]),
                acr=_mean([r.acr for r in mine]),
            )
        )
    return rows


def weather_chart(rows: list[WeatherRow], *, chart_id: str = "weather-bars") -> Figure:
    """Random vs worst-case accuracy of the base classifier, one group of bars per set."""
    sets = [r for r in rows if r.severity is not None]
    description = "; ".join(
        f"{r.weather} {r.severity}: random {_pct(r.random)}, worst case {_pct(r.worst)}"
        for r in sets
    )
    spec = bar_chart(
        [f"{r.weather} {r.severity}" for r in sets],
        [
            Bars("random weather", [r.random for r in sets]),
            Bars("worst case (simulation attack)", [r.worst for r in sets]),
        ],
        title="Base classifier: random vs worst-case weather accuracy",
        description=description,
        x_label="weather and severity",
        y=Axis("accuracy (base classifier)", 0.0, 1.0, percent=True),
    )
    return Figure(chart_id, spec, description)


def panels(submission_id: int, mine: list[StageResultPublic], *, skip: int = 1) -> list[Panel]:
    """The example panels the stage drew, with the route that serves them; each image also
    gets its ``position`` in the stage's test subset (every ``skip``-th source image), the
    number researchers match against the records."""
    out = []
    for result in mine:
        if result.summary.get("kind") != "examples":
            continue
        for panel in result.summary.get("panels", []):
            out.append(
                Panel(
                    weather=panel["weather"],
                    severity=panel["severity"],
                    url=FILE_URL.format(submission_id=submission_id, name=panel["file"]),
                    images=[
                        {**image, "position": image["index"] // max(skip, 1)}
                        for image in panel["images"]
                    ],
                )
            )
    return out


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known and len(known) == len(values) else None


def _pct(value: float | None) -> str:
    return "not measured" if value is None else f"{value * 100:.1f}%"
