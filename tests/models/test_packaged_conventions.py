"""Issue 26 §1–§2: the packaged CIFAR definitions resolve to the papers' conventions of their
headline figures, and say so in the rows stored with every result (docs/researchers/
conventions.md)."""

from __future__ import annotations

import pytest

from models.catalog.benchmarks import packaged_definitions
from models.stages import registry

DEFINITIONS = {d.name: d for d in packaged_definitions()}


def _row(name: str, stage: str) -> dict:
    definition = DEFINITIONS[name]
    return registry.get(stage).protocol_row(definition.stage_block(stage), definition)


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_heatmaps_draw_one_sign_per_image_as_the_papers_release(name):
    row = _row(name, "fourier_sensitivity")
    assert row["sensitivity"]["channel_signs"] == "shared"
    assert row["label"] == "quick"  # the shipped protocol, not a custom one
    assert DEFINITIONS[name].version >= 8  # bumped with the convention


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_lens_figures_are_taken_in_pixel_space_under_a_new_fingerprint(name):
    row = _row(name, "fourier_lens")
    assert row["lens_version"] == 2 and row["parameters"]["pixel_step"] == 0.25
    old = {k: v for k, v in row.items() if k != "lens_version"}
    old["parameters"] = {**row["parameters"], "pixel_step": 1.0}
    from models.stages.fourier_lens.block import fingerprint

    assert fingerprint({**old, "seed": row["lens_seed"]}) != row["fingerprint"]
    assert fingerprint({**row, "seed": row["lens_seed"], "lens_version": 1}) != row["fingerprint"]
