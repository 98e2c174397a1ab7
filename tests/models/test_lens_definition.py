"""The ``stages.fourier_lens`` definition block: validation, presets, the stored plan, and the
example block the guide gives (docs/researchers/fourier-lens.md) for the packaged CIFAR-10/100
definitions."""

from __future__ import annotations

import json

import pytest
from sqlalchemy.orm import Session

from models.catalog.benchmarks import packaged_definitions, parse_definition, upsert_benchmark
from models.core.errors import BenchmarkDefinitionError
from models.stages import registry
from models.stages.fourier_lens.stage import PRESETS
from tests.support.service_factories import tiny_definition

#: The blocks recommended for the packaged clean benchmarks (the guide's Fourier lens page).
CIFAR10_BLOCK = {"repo": "uoft-cs/cifar10", "preset": "paper"}
CIFAR100_BLOCK = {"repo": "uoft-cs/cifar100", "preset": "paper", "pixel_pairs": 10}
#: The guide's complete example (the paper protocol plus the smoothed classifier's paths).
README_BLOCK = {"repo": "uoft-cs/cifar10", "preset": "paper", "smoothed": True, "noise_samples": 16}


def _with_block(block: dict, **changes: object) -> dict:
    doc = tiny_definition()
    doc.update(changes)
    doc["stages"] = {"fourier_lens": block}
    return doc


def test_the_paper_preset_is_stored_with_its_plan_and_fingerprint(session: Session):
    benchmark = upsert_benchmark(session, parse_definition(json.dumps(_with_block(CIFAR10_BLOCK))))
    row = benchmark.stages["fourier_lens"]
    assert (row["subset_skip"], row["subset_limit"], row["num_images"]) == (1, None, 10_000)
    assert row["parameters"] == PRESETS["paper"] and row["label"] == "paper"
    assert row["work"] == {
        "amplitude": 5000, "phase": 5000, "pixel_within": 2000, "pixel_between": 9000,
        "jacobian": 400,
    }  # fmt: skip
    assert row["units"] == {"base": 21_400} and row["lens_seed"] == 0
    assert len(row["fingerprint"]) == 64


def test_overrides_label_the_run_custom_and_change_the_fingerprint():
    stage = registry.get("fourier_lens")

    def row(block: dict) -> dict:
        definition = parse_definition(json.dumps(_with_block(block)))
        return stage.protocol_row(definition.stage_block("fourier_lens"), definition)

    quick = row({"repo": "r", "preset": "quick"})
    assert quick["label"] == "quick" and quick["units"] == {"base": 500 + 500 + 200 + 900 + 100}
    same = row({"repo": "r", "preset": "quick", "paths": 500})  # equal to the preset: not custom
    assert same["label"] == "quick" and same["fingerprint"] == quick["fingerprint"]
    custom = row({"repo": "r", "preset": "quick", "paths": 40, "seed": 3})
    assert custom["label"] == "quick+custom" and custom["lens_seed"] == 3
    assert custom["fingerprint"] != quick["fingerprint"]
    smoothed = row(
        {"repo": "r", "preset": "quick", "smoothed": True, "kinds": ["phase", "jacobian"]}
    )
    assert smoothed["units"] == {"base": 600, "smoothed": 500}
    # neither the kinds run nor the smoothed variant change what a base-classifier figure means
    assert smoothed["fingerprint"] == quick["fingerprint"]


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"preset": "fast"}, "preset"),
        ({"kinds": ["amplitude", "amplitude"]}, "repeats"),
        ({"kinds": ["wavelet"]}, "kinds"),
        ({"kinds": []}, "kinds"),
        ({"kinds": ["jacobian"], "smoothed": True}, "smoothed needs a path kind"),
        ({"steps": 1}, "steps"),
        ({"low_frequency_fraction": 0}, "low_frequency_fraction"),
        ({"hff_threshold": 1.0}, "hff_threshold"),
        ({"paths": 0}, "paths"),
        ({"noise_samples": 0}, "noise_samples"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_invalid_lens_blocks_name_the_field(block: dict, message: str):
    with pytest.raises(BenchmarkDefinitionError, match=message):
        parse_definition(json.dumps(_with_block({"repo": "local/tiny", **block})))


def test_a_protocol_the_clean_set_cannot_hold_is_refused_at_load(session: Session):
    cifar100 = _with_block({"repo": "uoft-cs/cifar100", "preset": "paper"}, num_classes=100)
    with pytest.raises(BenchmarkDefinitionError, match=r"pixel_pairs=200.*pixel_pairs ≤ 50"):
        upsert_benchmark(session, parse_definition(json.dumps(cifar100)))
    session.rollback()
    small = _with_block({"repo": "r", "source_size": 600, "kinds": ["amplitude"]}, name="small")
    with pytest.raises(BenchmarkDefinitionError, match="paths=5000 needs 2·paths ≤ 600"):
        upsert_benchmark(session, parse_definition(json.dumps(small)))


def test_recommended_packaged_blocks_load_next_to_the_packaged_definitions(session: Session):
    """The guide's blocks for cifar10 and cifar100 validate against those definitions."""
    by_name = {d.name: d.model_dump(mode="json") for d in packaged_definitions()}
    for name, block, units in (
        ("cifar10", CIFAR10_BLOCK, {"base": 21_400}),
        ("cifar100", CIFAR100_BLOCK, {"base": 5000 + 5000 + 1000 + 49_500 + 400}),
    ):
        doc = by_name[name]
        doc["stages"] = {**doc["stages"], "fourier_lens": block}
        stored = upsert_benchmark(session, parse_definition(json.dumps(doc)))
        assert stored.stages["fourier_lens"]["units"] == units
        assert stored.stages["fourier_lens"]["label"] == (
            "paper" if name == "cifar10" else "paper+custom"
        )
    doc = _with_block(README_BLOCK, name="readme")
    stored = upsert_benchmark(session, parse_definition(json.dumps(doc)))
    assert stored.stages["fourier_lens"]["units"] == {"base": 21_400, "smoothed": 21_000}
