"""The ``fourier_sensitivity`` block of benchmark definitions: validation, the stored protocol
(label, subset, points, shards, cost), the plan of units, and the leaderboard metric specs."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from certbench.fourier.protocol import PROTOCOLS
from certbench.fourier.spectral import BAND_EDGES
from models.catalog.benchmarks import parse_definition, upsert_benchmark
from models.core.errors import BenchmarkDefinitionError
from models.stages import registry
from models.stages.fourier_sensitivity.stage import SHARD_FORWARD_PASSES, point_range
from models.stages.fourier_sensitivity.text import band_edges
from tests.support.service_factories import tiny_definition

STAGE = "fourier_sensitivity"
GUIDE_PAGE = Path(__file__).resolve().parents[2] / "docs" / "researchers" / "fourier-sensitivity.md"
#: The block the guide's Fourier sensitivity page shows for CIFAR-10 (its test below checks they
#: agree).
EXAMPLE = {"protocol": "quick", "repo": "uoft-cs/cifar10"}


def _stored(session: Session, block: dict, name: str = "tiny") -> dict:
    doc = tiny_definition(name)
    doc["stages"] = {STAGE: block}
    return upsert_benchmark(session, parse_definition(json.dumps(doc))).stages[STAGE]


def test_the_paper_protocol_is_stored_labelled_and_costed(session: Session):
    row = _stored(session, {"protocol": "paper", "repo": "uoft-cs/cifar10"})
    assert (row["label"], row["smoothed"], row["num_images"], row["subset_skip"]) == (
        "paper", True, 200, 50,
    )  # fmt: skip
    assert row["sensitivity"] == PROTOCOLS["paper"].model_dump(mode="json")
    assert row["points"] == 514 and row["points_per_shard"] == 1 and row["shards"] == 514
    assert row["forward_passes_per_point"] == 200 * (100 + 100_000) + 200
    assert row["forward_passes"] == 514 * row["forward_passes_per_point"]
    assert row["forward_passes"] > 1e10  # what the pages call expensive


def test_the_quick_protocol_packs_points_by_cost(session: Session):
    row = _stored(session, EXAMPLE)
    assert (row["label"], row["num_images"], row["points"]) == ("quick", 100, 130)
    per_point = 100 * (100 + 10_000) + 100
    assert row["forward_passes_per_point"] == per_point
    assert row["points_per_shard"] == SHARD_FORWARD_PASSES // per_point
    assert row["shards"] == -(-130 // row["points_per_shard"])
    assert "NOT the paper" in row["description"]


def test_a_base_only_map_is_one_cheap_shard(session: Session):
    row = _stored(session, {"protocol": "paper", "repo": "r", "smoothed": False})
    assert row["label"] == "paper" and row["forward_passes"] == 514 * 200
    assert (row["points_per_shard"], row["shards"]) == (514, 1)


def test_overrides_and_short_sources_label_the_protocol_custom(session: Session):
    row = _stored(session, {"protocol": "paper", "repo": "r", "n": 1000, "stride": 4})
    assert row["label"] == "paper+custom" and "n=1000" in row["description"]
    assert row["sensitivity"]["n"] == 1000 and row["points"] == 34
    small = _stored(session, {"protocol": "paper", "repo": "r", "source_size": 300}, "tiny2")
    assert (small["num_images"], small["label"]) == (6, "paper+custom")  # 300 / 50
    assert "images=6" in small["description"]


@dataclass(frozen=True)
class StagesOnly:
    """What ``units`` reads of a work item: the stored stage rows."""

    stages: dict


def test_units_tile_the_points_and_count_perturbed_images(session: Session, settings):
    row = _stored(session, {"protocol": "quick", "repo": "r", "points_per_shard": 40})
    stage = registry.get(STAGE)
    units = stage.units(StagesOnly({STAGE: row}), settings)  # type: ignore[arg-type]
    ranges = [point_range(u.name) for u in units]
    assert ranges == [(0, 40), (40, 80), (80, 120), (120, 130)]
    assert [u.num_images for u in units] == [4000, 4000, 4000, 1000]
    assert len({u.name for u in units}) == len(units)
    assert stage.shard_size(settings) >= max(u.num_images for u in units)  # one shard per unit


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"protocol": "fast"}, "protocol"),
        ({"protocol": None}, "protocol"),
        ({"n": 0}, "n"),
        ({"alpha": 0.7}, "alpha"),
        ({"stride": 0}, "stride"),
        ({"channel_signs": "both"}, "channel_signs"),
        ({"grid_size": 1}, "grid_size"),
        ({"points_per_shard": 0}, "points_per_shard"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_invalid_blocks_name_the_field(change: dict, message: str):
    doc = tiny_definition()
    block = {"protocol": "quick", "repo": "r"} | change
    doc["stages"] = {STAGE: {k: v for k, v in block.items() if v is not None}}
    with pytest.raises(BenchmarkDefinitionError, match=rf"stages\.{STAGE}(.|\n)*{message}"):
        parse_definition(json.dumps(doc))


def test_metric_specs_name_the_paper_and_follow_the_block():
    stage = registry.get(STAGE)
    specs = {s.key: s for s in stage.metric_specs({"smoothed": True, "label": "paper"},
                                                  test_sets=1, bands=())}  # fmt: skip
    acr = [f"fourier_acr_{b}" for b in ("low", "mid", "high")]
    base = [f"fourier_base_{b}" for b in ("low", "mid", "high")]
    assert list(specs) == acr + base
    assert [specs[k].column for k in acr + base] == [True] * 3 + [False] * 3
    assert {specs[k].kind for k in acr} == {"radius"} and {specs[k].kind for k in base} == {
        "percent"
    }
    title = "A Spectral View of Randomized Smoothing under Common Corruptions"
    assert all(title in s.help and "Sun et al. 2022" in s.help for s in specs.values())
    assert "the paper's protocol" in specs["fourier_acr_low"].help
    base_only = stage.metric_specs(
        {"smoothed": False, "label": "quick", "description": "cheap"}, test_sets=1, bands=()
    )
    assert [s.key for s in base_only if s.column] == base
    assert "NOT the paper's" in base_only[0].help
    assert stage.metric_specs(None, test_sets=1, bands=()) == []
    assert set(acr + base) <= set(registry.metric_keys())  # sortable everywhere
    assert stage.queue == "certbench.fourier"


def test_band_edges_are_the_corruption_sets():
    assert band_edges(32) == pytest.approx(BAND_EDGES)
    assert band_edges(64) == pytest.approx(tuple(2 * e for e in BAND_EDGES))


def test_the_guides_example_block_is_this_one_and_loads():
    text = GUIDE_PAGE.read_text(encoding="utf-8")
    blocks = re.findall(r"```json\n(.*?)```", text, flags=re.S)
    examples = [json.loads(b) for b in blocks if f'"{STAGE}"' in b]
    assert examples, f"{GUIDE_PAGE.name} shows no fourier_sensitivity block"
    assert examples[0] == {"stages": {STAGE: EXAMPLE}}
    doc = tiny_definition()
    doc.update(examples[0])
    assert parse_definition(json.dumps(doc)).stage_block(STAGE) is not None
