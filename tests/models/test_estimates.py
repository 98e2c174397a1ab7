"""Every built-in stage's ``estimate`` against forward passes counted by hand from its protocol,
the run-length cost of an image range, the Stage default, and the sum with this fleet's rates."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import pytest
from sqlalchemy.orm import Session

from models.catalog.benchmarks import parse_definition, upsert_benchmark
from models.core.settings import Settings
from models.runs.estimates import Rate, estimate_work, for_manifest
from models.stages.base import Stage, StageEstimate, Unit, UnitCost
from models.stages.work import WorkItem, planning_item
from tests.support.service_factories import tiny_definition

#: ``tiny_definition``: two test sets of 3 images (6 source images, every 2nd), n0 = 4, n = 16.
CERTIFY_PER_IMAGE = 4 + 16


def _estimates(
    session: Session, settings: Settings, doc: dict[str, Any], *, std: float | None = None
) -> dict[str, StageEstimate]:
    benchmark = upsert_benchmark(session, parse_definition(json.dumps(doc)))
    manifest = {} if std is None else {"preprocessing": {"mean": [0.5] * 3, "std": [std] * 3}}
    work = for_manifest(session, benchmark, sigma=0.25, manifest=manifest, settings=settings)
    return {e.stage: e for e in work.stages}


def _with_stage(stage: str, block: dict[str, Any], **changes: Any) -> dict[str, Any]:
    doc = tiny_definition(**changes)
    doc["stages"] = {stage: {"repo": "local/tiny", "source_size": 6} | block}
    return doc


def test_certification_is_images_times_n0_plus_n_on_every_test_set(session, settings):
    estimate = _estimates(session, settings, tiny_definition())["certification"]
    assert estimate.exact and estimate.forward_passes == 2 * 3 * CERTIFY_PER_IMAGE == 120
    assert [u.unit for u in estimate.units] == ["set0", "set1"]
    assert estimate.unit("set1").passes(1, 3) == 2 * CERTIFY_PER_IMAGE
    assert "(n0 4 + n 16)" in estimate.basis


def test_pd_robustness_is_an_upper_bound_over_every_attack_plan(session, settings):
    block = {"anchors": "a.safetensors", "eps": [8, 16], "n_iter": 5, "n_target_classes": 3}
    estimate = _estimates(session, settings, _with_stage("pd_robustness", block))["pd_robustness"]
    # per image: 1 clean + 2 ε × (APGD-CE + 3 targets) × (ℓ∞ APGD 6 + projected check 1 +
    # PD-aware APGD 6) = 1 + 2 × 4 × 13 = 105; 3 images
    assert estimate.forward_passes == 3 * 105 == 315
    assert not estimate.exact and "upper bound" in estimate.note
    untargeted = dict(block, n_target_classes=0, eps=[8])
    three_classes = _with_stage("pd_robustness", block, name="three")
    three_classes["num_classes"] = 3  # fewer than 4 classes: no targeted runs
    assert _estimates(session, settings, _with_stage("pd_robustness", untargeted, name="u"))[
        "pd_robustness"
    ].forward_passes == 3 * (1 + 13)  # fmt: skip
    assert _estimates(session, settings, three_classes)["pd_robustness"].forward_passes == 3 * (
        1 + 2 * 13
    )


def test_fourier_sensitivity_is_exact_per_point_and_image(session, settings):
    block = {"protocol": "quick", "n0": 2, "n": 8, "stride": 1, "grid_size": 4, "skip": 2,
             "limit": 3}  # fmt: skip
    estimate = _estimates(session, settings, _with_stage("fourier_sensitivity", block))[
        "fourier_sensitivity"
    ]
    # a 4 × 4 grid has 10 distinct Fourier basis images (16 bins, 4 self-conjugate: (16+4)/2)
    assert estimate.exact and estimate.images == 10 * 3
    assert estimate.forward_passes == 10 * 3 * (1 + 2 + 8) == 330
    base_only = _with_stage("fourier_sensitivity", dict(block, smoothed=False), name="base")
    assert _estimates(session, settings, base_only)["fourier_sensitivity"].forward_passes == 30


def test_weather_attack_counts_restarts_noise_samples_and_certify(session, settings):
    block = {"weathers": ["rain"], "severities": [1, 2], "steps": 2, "restarts": 3,
             "noise_samples": 2, "examples": 1, "skip": 2}  # fmt: skip
    estimate = _estimates(session, settings, _with_stage("weather_attack", block))["weather_attack"]
    per_unit = {u.unit: u.passes() for u in estimate.units}
    # a restart classifies its start and 2 iterates: 3 passes; 3 restarts = 9
    assert per_unit == {
        "rain-1": 3 * (1 + 9),  # a clean pass + every restart (upper bound)
        "rain-2": 3 * (1 + 9),
        "smoothed-rain-1": 3 * (9 * 2 + 4 + 16),  # every restart on 2 noisy copies + CERTIFY
        "smoothed-rain-2": 3 * (9 * 2 + 4 + 16),
        "examples": 1 * 9,  # one weather's restarts for the one example image
    }
    assert estimate.forward_passes == 60 + 228 + 9 and not estimate.exact


def test_fourier_lens_counts_paths_jacobians_and_bounds_pixel_paths(session, settings):
    block = {"preset": "quick", "paths": 2, "steps": 5, "pixel_pairs": 1, "jacobian_images": 2,
             "smoothed": True, "noise_samples": 3, "source_size": 100}  # fmt: skip
    doc = _with_stage("fourier_lens", block)
    estimate = _estimates(session, settings, doc, std=0.5)["fourier_lens"]
    # pixel paths step 0.25 in pixel units, whatever the std: ‖x₁ − x₀‖ ≤ √(32·32·3) ≈ 55.4
    # → at most 222 images; 10 within-class and C(10, 2) = 45 between-class pairs
    paths = 2 * 5 + 2 * 5 + 10 * 222 + 45 * 222
    assert {u.unit: u.passes() for u in estimate.units} == {
        "base": paths + 2,  # + one forward pass per Jacobian image
        "smoothed": paths * 3,  # every path image on 3 noisy copies, no Jacobian
    }
    assert not estimate.exact and "222 images" in estimate.note
    base = estimate.unit("base")
    assert base.passes(0, 2) == 10 and base.passes(2, 5) == 2 * 5 + 222  # phase, then pixels
    no_entry = _estimates(session, settings, doc)["fourier_lens"]  # no preprocessing known
    assert no_entry.forward_passes == (2 * 5 * 2 + 55 + 2) + (2 * 5 * 2 + 55) * 3
    assert "lower bound" in no_entry.note


def test_unit_cost_counts_any_image_range_of_its_runs():
    cost = UnitCost("u", ((2, 5), (3, 7)))
    assert cost.images == 5 and cost.passes() == 2 * 5 + 3 * 7
    assert cost.passes(1, 4) == 5 + 2 * 7 and cost.passes(4, 4) == 0 and cost.passes(2) == 21


class _Plain(Stage):
    name = "plain"
    title = "A stage that declares no cost"
    queue = "q"
    sizes: ClassVar[dict[str, int]] = {"a": 4, "b": 2}

    def units(self, item: WorkItem, settings: Settings) -> list[Unit]:
        return [Unit(name, size) for name, size in self.sizes.items()]


def test_the_stage_default_counts_one_pass_per_image_and_says_so(session, settings):
    benchmark = upsert_benchmark(session, parse_definition(json.dumps(tiny_definition())))
    item = planning_item(benchmark, sigma=0.25, manifest={}, settings=settings)
    estimate = _Plain().estimate(item, settings)
    assert estimate.forward_passes == 6 and not estimate.exact
    assert "declares no cost" in estimate.note


def test_seconds_need_every_stage_measured_on_this_fleet(session, settings):
    doc = _with_stage("pd_robustness", {"anchors": "a.safetensors", "eps": [8], "n_iter": 5,
                                        "n_target_classes": 0})  # fmt: skip
    stages = list(_estimates(session, settings, doc).values())
    unmeasured = estimate_work(stages, {"certification": Rate(40.0, 2.0, "test")})
    assert unmeasured.forward_passes == 120 + 3 * 14 and unmeasured.seconds is None
    assert "no pd_robustness shard has been measured" in unmeasured.basis
    rates = {"certification": Rate(40.0, 2.0, "a"), "pd_robustness": Rate(7.0, 0.5, "b")}
    measured = estimate_work(stages, rates)
    assert measured.seconds == pytest.approx(120 / 40 + 42 / 7)
