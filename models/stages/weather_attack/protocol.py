"""The worst-case weather stage's protocol: its definition block, the resolved attack settings,
unit names and the digest that ties shards to one protocol (see ``weather_attack``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator

from models.benchmarks.definitions import BenchmarkSchema, ImageSource, Seed
from models.benchmarks.sources import image_source_spec
from models.core.errors import StorageError
from models.core.settings import Settings
from models.stages.base import StageEstimate, StageSpec, Unit, UnitCost, run_seed_metadata
from models.stages.work import WorkItem

if TYPE_CHECKING:
    from certbench.weather import AttackConfig

STAGE = "weather_attack"
EXAMPLES = "examples"
SMOOTHED = "smoothed-"
PAPER = (
    "Wang et al., Evaluating Worst Case Adversarial Weather Perturbations Robustness, NeurIPS "
    "2022 ML Safety Workshop, https://openreview.net/forum?id=Q69Aj3P0PtV"
)
Weather = Literal["rain", "snow"]
Severity = Annotated[int, Field(ge=1, le=5)]

#: Bounds of the attack's numbers: steps and restarts (each a forward-backward pass per image),
#: a position step in pixels (at most an image's side), an angle step as a fraction of each angle
#: bound's half-width (2: the whole range in one step), the jitter truncation in standard
#: deviations, fixed noise vectors per image.
MAX_ATTACK_STEPS = 10_000
MAX_RESTARTS = 1_000
MAX_POSITION_STEP = 1024.0
MAX_ANGLE_STEP = 2.0
MAX_TRUNCATION = 100.0
MAX_NOISE_SAMPLES = 100_000

_ALL_WEATHERS: list[Weather] = ["rain", "snow"]


class WeatherAttackError(RuntimeError):
    """The simulation attack failed its own checks (an iterate left Δ): a bug, reported as a
    worker error with the violated bound in the message."""


class WeatherAttackProtocol(ImageSource):
    """Definition block ``stages.weather_attack``.

    The clean images (``repo``/``folder``, every ``skip``-th, the protocol's skip by default)
    are attacked for every weather in ``weathers`` at every level in ``severities``: PGD with
    ``steps`` steps (the paper's 10) and ``restarts`` restarts (restart 0 = the random test
    set's weather), ``position_step`` pixels and ``angle_step`` × each angle bound per step,
    particle angle offsets bounded at ``truncation`` × the generator's jitter. ``seed`` is the
    seed of the random weather sets (``certbench generate weather --seed``; default: the
    benchmark protocol's seed): it is public and draws restart 0's start only, the random test
    set's weather, the same for every entry. The starts of restarts 1 and on, the SmoothAdv noise
    and CERTIFY's noise are drawn from each run's secret seed (commit-reveal), never from this
    one. With ``smoothed`` the smoothed classifier is attacked too (``noise_samples`` fixed
    noise vectors per image) and the attacked images are certified with the benchmark's CERTIFY
    protocol. ``examples`` images (the first of the subset) get clean / random / attacked /
    difference panels at the highest severity.
    """

    weathers: list[Weather] = Field(default_factory=lambda: _ALL_WEATHERS.copy(), min_length=1)
    severities: list[Severity] = Field(default_factory=lambda: [1, 2, 3, 4, 5], min_length=1)
    steps: int = Field(default=10, ge=0, le=MAX_ATTACK_STEPS)
    restarts: int = Field(default=5, ge=1, le=MAX_RESTARTS)
    position_step: float = Field(default=1.0, ge=0, le=MAX_POSITION_STEP)
    angle_step: float = Field(default=0.25, ge=0, le=MAX_ANGLE_STEP)
    truncation: float = Field(default=3.0, gt=0, le=MAX_TRUNCATION)
    seed: Seed | None = None
    smoothed: bool = True
    noise_samples: int = Field(default=8, ge=1, le=MAX_NOISE_SAMPLES)
    examples: int = Field(default=4, ge=0, le=16)

    @field_validator("weathers", "severities")
    @classmethod
    def _distinct(cls, values: list[Any]) -> list[Any]:
        if len(set(values)) != len(values):
            raise ValueError(f"weather_attack lists a value twice: {values}; give each once")
        return values


@dataclass(frozen=True)
class WeatherSpec(StageSpec):
    """The stored protocol resolved against this deployment's folders."""

    weathers: tuple[str, ...]
    severities: tuple[int, ...]
    seed: int
    """The random weather sets' public seed: restart 0 only (``weather_attack`` docstring)."""
    smoothed: bool
    noise_samples: int
    examples: int

    @property
    def example_severity(self) -> int:
        return max(self.severities)

    def attack_config(self) -> AttackConfig:
        from certbench.weather import AttackConfig

        p = self.row
        return AttackConfig(
            steps=p["steps"],
            restarts=p["restarts"],
            position_step=p["position_step"],
            angle_step=p["angle_step"],
            truncation=p["truncation"],
            seed=self.seed,
        )


def weather_spec(protocol: Mapping[str, Any], settings: Settings) -> WeatherSpec:
    """Resolve a benchmark's stored weather-attack row."""
    as_stored = {key: protocol[key] for key in ("seed", "smoothed", "noise_samples", "examples")}
    return WeatherSpec(
        images=image_source_spec(protocol, name="_weather_attack", settings=settings),
        row=dict(protocol),
        weathers=tuple(protocol["weathers"]),
        severities=tuple(protocol["severities"]),
        **as_stored,
    )


def stored_row(block: WeatherAttackProtocol, definition: BenchmarkSchema) -> dict[str, Any]:
    """The row stored with the benchmark: the block plus the derived subset, the resolved seed
    and the CERTIFY protocol."""
    skip, limit, count = block.subset(definition.protocol)
    row = block.model_dump(mode="json")
    row.update(
        subset_skip=skip,
        subset_limit=limit,
        num_images=count,
        seed=definition.protocol.seed if block.seed is None else block.seed,
        examples=min(block.examples, count),
        severities=sorted(block.severities),
        certify={
            "n0": definition.protocol.n0,
            "n": definition.protocol.n,
            "alpha": definition.protocol.alpha,
        },
    )
    return row


def unit_name(kind: str, weather: str, severity: int) -> str:
    """``rain-3`` (base classifier) or ``smoothed-rain-3``."""
    return f"{SMOOTHED if kind == 'smoothed' else ''}{weather}-{severity}"


def parse_unit(unit: str) -> tuple[str, str, int]:
    """(kind, weather, severity) of an attack unit; inverse of :func:`unit_name`."""
    kind = "smoothed" if unit.startswith(SMOOTHED) else "base"
    weather, _, severity = unit.removeprefix(SMOOTHED).rpartition("-")
    return kind, weather, int(severity)


def certify_protocol(item: WorkItem) -> dict[str, Any]:
    """What the smoothed units certify with: the benchmark's CERTIFY protocol, the model's σ."""
    return {"sigma": item.sigma, "n0": item.n0, "n": item.n, "alpha": item.alpha}


def protocol_digest(item: WorkItem, spec: WeatherSpec) -> str:
    """SHA-256 of everything a shard's records depend on besides the model, the images and the
    run seed (whose commitment the shard names beside it)."""
    text = json.dumps([spec.describe(), certify_protocol(item)], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def result_seeds(item: WorkItem, spec: WeatherSpec) -> dict[str, Any]:
    """The seeds merged records and stored results carry (served only after the run ends): the
    run's revealed seed (``run_seed_metadata``) and the random weather sets' public seed."""
    return {**run_seed_metadata(item), "weather_seed": spec.seed}


def work_estimate(item: WorkItem, units: Sequence[Unit]) -> StageEstimate:
    """Forward passes per image of each unit (``certbench.weather.search``): a restart classifies
    its start and each of ``steps`` iterates (steps + 1 passes). Base units: one clean pass +
    every restart, an upper bound (an image leaves the search once broken); smoothed units: every
    restart on ``noise_samples`` noisy copies, then CERTIFY's n0 + n, exact; examples: every
    restart for each weather (``weather_examples``), an upper bound."""
    row = item.stages[STAGE]
    restart = row["restarts"] * (row["steps"] + 1)
    cost = {
        "base": 1 + restart,
        "smoothed": restart * row["noise_samples"] + item.n0 + item.n,
        EXAMPLES: len(row["weathers"]) * restart,
    }

    def kind(unit: str) -> str:
        return EXAMPLES if unit == EXAMPLES else parse_unit(unit)[0]

    smoothed = (
        f"; smoothed: {restart:,} × {row['noise_samples']} noise samples + (n0 {item.n0:,} + "
        f"n {item.n:,})"
        if row["smoothed"]
        else ""
    )
    sets = len(row["weathers"]) * len(row["severities"])
    return StageEstimate(
        stage=STAGE,
        units=tuple(UnitCost(u.name, ((u.num_images, cost[kind(u.name)]),)) for u in units),
        exact=False,
        basis=f"{row['num_images']:,} images × {sets} weather set(s); per image, base: 1 + "
        f"restarts {row['restarts']} × (steps {row['steps']} + 1){smoothed}; "
        f"{row['examples']} example image(s)",
        note="an upper bound for the base classifier's attack (an image leaves the search once "
        "broken); backward passes of the attacks are not counted",
    )


def check_one_protocol(item: WorkItem, metadata: Sequence[Mapping[str, Any]]) -> None:
    """Refuse shards computed under different protocols (a definition changed while the
    submission ran; ``metadata``: every shard's): their figures would not describe one
    evaluation."""
    digests = {found.get("protocol_sha256") for found in metadata}
    if len(digests) > 1:
        raise StorageError(
            f"the weather-attack shards of submission {item.submission_id} were computed under "
            f"{len(digests)} different protocols; re-run the submission fresh"
        )
