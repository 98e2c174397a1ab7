"""The ``stages.fourier_lens`` definition block: protocol presets, overrides, feasibility on the
clean set, the plan's size per kind, the fingerprint that makes entries' figures comparable, and
the stored row resolved for a worker (``LensSpec``).

Pure pydantic/stdlib (no torch, numpy or pyarrow): it is validated whenever a definition loads,
in the API too. The stage itself is ``models.stages.fourier_lens.stage``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import comb
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from models.benchmarks.definitions import ImageSource, Seed, SourceCount
from models.benchmarks.sources import image_source_spec
from models.core.settings import Settings
from models.stages.base import StageEstimate, StageSpec, UnitCost

if TYPE_CHECKING:
    from certbench.lens import LensProtocol

Kind = Literal["amplitude", "phase", "pixel_within", "pixel_between", "jacobian"]
#: The core's work kinds in plan order (``certbench.lens.metrics.KINDS``; not imported here so the
#: API does not load pyarrow/scipy to list columns; a test keeps the two equal).
KINDS: tuple[str, ...] = ("amplitude", "phase", "pixel_within", "pixel_between", "jacobian")
PATH_KINDS = KINDS[:4]
#: Leaderboard metric → the kind it summarises (``certbench.lens.metrics.METRICS``).
METRICS: dict[str, str] = {
    "hff_amplitude": "amplitude",
    "cd_amplitude": "amplitude",
    "hff_phase": "phase",
    "cd_phase": "phase",
    "hff_pixel_within": "pixel_within",
    "hff_pixel_between": "pixel_between",
    "jacobian_norm": "jacobian",
}
#: The equation's HFF (Nyquist bin kept), beside the headline's released-code HFF
#: (``certbench.lens.metrics.NYQUIST_METRICS``): metric → kind.
NYQUIST_METRICS: dict[str, str] = {
    f"{key}_nyquist": kind for key, kind in METRICS.items() if key.startswith("hff_")
}
SMOOTHED_SUFFIX = "_smoothed"
#: ``certbench.lens.lens.PROTOCOL_VERSION`` (a test keeps them equal): 2 takes every figure in
#: pixel space [0, 1], 1 took them in each entry's declared normalised space. In the
#: fingerprint, so figures of the two versions are never compared or pooled.
LENS_VERSION = 2
BASE, SMOOTHED = "base", "smoothed"

PAPER = (
    'Fridovich-Keil et al., "Models Out of Line: A Fourier Lens on Distribution Shift '
    'Robustness", NeurIPS 2022'
)

#: Protocol presets. ``paper`` is §3's CIFAR-10 protocol with the released code's constants
#: (5,000 pairs, 100 λ, 40 % of frequencies, 10 % HFF threshold, 200 pixel pairs, 400 Jacobian
#: images, exact Jacobian); ``quick`` is NOT the paper's: 10× fewer Fourier and pixel pairs and
#: 4× fewer Jacobian images (means with wider intervals, about a tenth of the cost).
PRESETS: dict[str, dict[str, int | float]] = {
    "paper": {
        "paths": 5000,
        "steps": 100,
        "low_frequency_fraction": 0.4,
        "hff_threshold": 0.1,
        "pixel_pairs": 200,
        "pixel_step": 0.25,
        "jacobian_images": 400,
        "jacobian_projections": 0,
    },
    "quick": {
        "paths": 500,
        "steps": 100,
        "low_frequency_fraction": 0.4,
        "hff_threshold": 0.1,
        "pixel_pairs": 20,
        "pixel_step": 0.25,
        "jacobian_images": 100,
        "jacobian_projections": 0,
    },
}


#: Bounds of the block's own numbers: points per path and projections, the pixel step (a
#: length in pixels, at most an image's side), noise draws per image.
MAX_STEPS = 10_000
MAX_PIXEL_STEP = 1024.0
MAX_NOISE_SAMPLES = 100_000


class LensBlock(ImageSource):
    """Definition block ``stages.fourier_lens``.

    The clean images come from ``repo``/``folder`` like every image source, but by default the
    *whole* split (``skip`` 1: the paper pairs all 10,000 CIFAR test images). ``preset`` picks
    the protocol (``paper`` or the cheaper ``quick``); any parameter given overrides it and the
    run is then labelled ``<preset>+custom``. ``kinds`` limits the work (default: all);
    ``smoothed`` adds the smoothed classifier's paths (``noise_samples`` draws per image at the
    submission's σ). ``seed`` (default: the benchmark protocol's public seed) draws the Fourier
    and pixel pairs only, the same for every entry; the smoothed noise and the random Jacobian
    projections are drawn from each run's secret seed (commit-reveal), never from this one.
    """

    skip: SourceCount | None = 1
    preset: Literal["paper", "quick"] = "paper"
    # counts are bounded by what a worker can hold and run (models.benchmarks.definitions' bounds)
    paths: SourceCount | None = None
    steps: int | None = Field(default=None, ge=2, le=MAX_STEPS)
    low_frequency_fraction: float | None = Field(default=None, gt=0, le=1)
    hff_threshold: float | None = Field(default=None, gt=0, lt=1)
    pixel_pairs: SourceCount | None = None
    pixel_step: float | None = Field(default=None, gt=0, le=MAX_PIXEL_STEP)
    jacobian_images: SourceCount | None = None
    jacobian_projections: int | None = Field(default=None, ge=0, le=MAX_STEPS)
    kinds: list[Kind] | None = Field(default=None, min_length=1)
    smoothed: bool = False
    noise_samples: int = Field(default=16, gt=0, le=MAX_NOISE_SAMPLES)
    seed: Seed | None = None

    @model_validator(mode="after")
    def _consistent(self) -> LensBlock:
        if self.kinds is not None and len(set(self.kinds)) != len(self.kinds):
            raise ValueError(f"fourier_lens.kinds repeats a kind: {self.kinds}")
        if self.smoothed and not set(self.run_kinds()) & set(PATH_KINDS):
            raise ValueError(
                "fourier_lens.smoothed needs a path kind (amplitude, phase, pixel_within or "
                "pixel_between): the Jacobian is always the base classifier's"
            )
        return self

    def run_kinds(self) -> list[str]:
        """The kinds computed, in plan order."""
        return [k for k in KINDS if self.kinds is None or k in self.kinds]

    def parameters(self) -> dict[str, int | float]:
        """The preset's parameters with this block's overrides."""
        values = dict(PRESETS[self.preset])
        values.update({k: getattr(self, k) for k in values if getattr(self, k) is not None})
        return values

    def label(self) -> str:
        """``paper``/``quick``, or ``<preset>+custom`` when an override changes a parameter."""
        custom = self.parameters() != PRESETS[self.preset]
        return f"{self.preset}+custom" if custom else self.preset


def work_sizes(
    parameters: Mapping[str, Any], kinds: Sequence[str], num_classes: int
) -> dict[str, int]:
    """Work units per kind, as ``lens_plan`` lays them for a clean set holding every class."""
    pairs = int(parameters["pixel_pairs"])
    sizes = {
        "amplitude": int(parameters["paths"]),
        "phase": int(parameters["paths"]),
        "pixel_within": num_classes * pairs,
        "pixel_between": comb(num_classes, 2) * pairs,
        "jacobian": int(parameters["jacobian_images"]),
    }
    return {k: sizes[k] for k in KINDS if k in kinds}


def feasibility(block: LensBlock, parameters: Mapping[str, Any], images: int, classes: int
                 ) -> list[str]:  # fmt: skip
    """Why the protocol cannot be drawn from ``images`` clean images (empty when it can).

    Pixel pairs use distinct images of each class; a class has at most images/classes of them
    when the set is balanced and fewer otherwise, so these are necessary conditions (CIFAR-100's
    test split has 100 images per class: pixel_pairs ≤ 50).
    """
    kinds, problems = block.run_kinds(), []
    per_class = images // classes
    if {"amplitude", "phase"} & set(kinds) and 2 * parameters["paths"] > images:
        problems.append(f"paths={parameters['paths']} needs 2·paths ≤ {images} clean images")
    if "pixel_within" in kinds and 2 * parameters["pixel_pairs"] > per_class:
        problems.append(
            f"pixel_pairs={parameters['pixel_pairs']} within-class pairs need "
            f"{2 * parameters['pixel_pairs']} images per class, the set has about {per_class}; "
            f"set pixel_pairs ≤ {per_class // 2}"
        )
    if "pixel_between" in kinds and parameters["pixel_pairs"] > per_class:
        problems.append(f"pixel_pairs={parameters['pixel_pairs']} exceeds {per_class} per class")
    if "jacobian" in kinds and parameters["jacobian_images"] > images:
        problems.append(f"jacobian_images={parameters['jacobian_images']} exceeds {images}")
    return problems


def fingerprint(row: Mapping[str, Any]) -> str:
    """What makes two entries' base-classifier figures comparable: the parameters, the pairs'
    seed and clean images (not local folders; not the runs' secret noise seeds, which only
    redraw the Monte Carlo noise of unbiased estimators). Effective-robustness analyses use lens
    metrics only across entries with the same fingerprint."""
    keys = ("parameters", "seed", "repo", "config", "revision", "split", "subset_skip",
            "subset_limit", "num_images", "lens_version")  # fmt: skip
    canonical = json.dumps({k: row.get(k) for k in keys}, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def pixel_path_bound(manifest: Mapping[str, Any], pixel_step: float) -> int | None:
    """The most images a pixel path can hold for this entry, or None without a manifest.

    A pixel path steps ``pixel_step`` along x₁ − x₀ in pixel space [0, 1] whatever the entry's
    preprocessing (``certbench.lens.interpolation.pixel_path_length``), and two images differ by
    at most 1 per pixel, so ‖x₁ − x₀‖ ≤ √(C·H·W). Real CIFAR pairs are 3–5 times shorter than
    this bound."""
    if not manifest.get("preprocessing"):
        return None
    channels, height, width = manifest.get("input_size") or (3, 32, 32)
    distance = math.sqrt(channels * height * width)
    return max(1, math.ceil(distance / pixel_step - 1e-12))


def work_estimate(
    row: Mapping[str, Any], manifest: Mapping[str, Any], num_classes: int
) -> StageEstimate:
    """Forward passes of each unit's work units, kind by kind in plan order: a Fourier path is
    ``steps`` images, a pixel path at most ``pixel_path_bound`` images (an upper bound; 1 each,
    a lower bound, when no entry's preprocessing is known), a Jacobian image one forward pass
    (its backward passes, one per class, are not counted); the smoothed unit scores every path
    image on ``noise_samples`` noisy copies."""
    parameters, sizes = row["parameters"], row["work"]
    bound = pixel_path_bound(manifest, parameters["pixel_step"])
    per_kind = {"amplitude": parameters["steps"], "phase": parameters["steps"],
                "pixel_within": bound or 1, "pixel_between": bound or 1, "jacobian": 1}  # fmt: skip
    units = []
    for unit in row["units"]:
        noise = row["noise_samples"] if unit == SMOOTHED else 1
        kinds = [k for k in KINDS if k in sizes and not (unit == SMOOTHED and k == "jacobian")]
        units.append(UnitCost(unit, tuple((sizes[k], per_kind[k] * noise) for k in kinds)))
    pixel = {"pixel_within", "pixel_between"} & set(sizes)
    if pixel and bound is None:
        note = "a lower bound: pixel paths count 1 image each here; their length depends on the "
        note += "entry's preprocessing (counted at their upper bound when a model is submitted)"
    elif pixel:
        note = f"an upper bound: pixel paths counted at their longest ({bound} images)"
    else:
        note = ""
    counts = ", ".join(f"{sizes[k]:,} {k}" for k in KINDS if k in sizes)
    return StageEstimate(
        stage="fourier_lens",
        units=tuple(units),
        exact=not note,
        basis=f"{counts} work unit(s) on {num_classes} classes; Fourier paths of "
        f"{parameters['steps']} images"
        + (f" × {row['noise_samples']} noise samples (smoothed)" if row.get("smoothed") else ""),
        note=note,
    )


@dataclass(frozen=True)
class LensSpec(StageSpec):
    """A stored ``fourier_lens`` row resolved against this deployment's folders."""

    parameters: dict[str, Any]
    kinds: tuple[str, ...]
    pairs_seed: int
    """The benchmark's public ``lens_seed``: the pairs (never the noise; module docstring)."""
    noise_samples: int
    units: dict[str, int]
    label: str
    fingerprint: str

    def protocol(self, unit: str, sigma: float) -> LensProtocol:
        """The core protocol of one unit (``smoothed``: vote fractions at ``sigma``)."""
        from certbench.lens import LensProtocol

        kinds = self.kinds if unit == BASE else tuple(k for k in self.kinds if k != "jacobian")
        return LensProtocol(
            **self.parameters,
            kinds=kinds,
            sigma=sigma if unit == SMOOTHED else None,
            noise_samples=self.noise_samples,
        )


def lens_spec(row: Mapping[str, Any], settings: Settings) -> LensSpec:
    """Resolve a benchmark's stored ``fourier_lens`` row."""
    return LensSpec(
        images=image_source_spec(row, name="_fourier_lens", settings=settings),
        parameters=dict(row["parameters"]),
        kinds=tuple(row["run_kinds"]),
        pairs_seed=int(row["lens_seed"]),
        noise_samples=int(row["noise_samples"]),
        units=dict(row["units"]),
        label=row["label"],
        fingerprint=row["fingerprint"],
        row=dict(row),
    )
