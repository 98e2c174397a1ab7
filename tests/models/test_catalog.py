"""Benchmark definitions: packaged files, validation, versioned upserts."""

from __future__ import annotations

import json

import pytest
from sqlalchemy.orm import Session

from models.catalog.benchmarks import (
    get_benchmark,
    load_definition,
    packaged_definitions,
    parse_definition,
    upsert_benchmark,
)
from models.core.errors import BenchmarkDefinitionError, NotFoundError
from models.core.settings import Settings
from tests.support.service_factories import (
    finished_submission,
    load_tiny,
    make_user,
    tiny_definition,
)


def test_packaged_definitions():
    definitions = {d.name: d for d in packaged_definitions()}
    assert set(definitions) == {
        f"{base}{suffix}"
        for base in ("cifar10", "cifar100")
        for suffix in ("", "-c", "-c-bar", "-f", "-weather")
    } | {"demo-digits"}
    assert len(definitions["cifar10-c"].test_sets) == 75
    assert len(definitions["cifar100-c-bar"].test_sets) == 50
    assert len(definitions["cifar10-f"].test_sets) == 192
    assert definitions["cifar100"].num_classes == 100
    protocol = definitions["cifar10"].protocol
    assert (protocol.n0, protocol.n, protocol.alpha, protocol.skip) == (100, 100_000, 0.001, 20)
    assert definitions["cifar10"].test_sets[0].num_images(protocol) == 500
    bands = {t.band for t in definitions["cifar10-c"].test_sets}
    assert bands == {"low", "mid", "high"}
    configs = [t.config for t in definitions["cifar10-f"].test_sets]
    assert "fc05_a0p5_s3" in configs and all("." not in c for c in configs)


def test_packaged_definitions_attack_the_clean_test_subset_with_k50_anchors():
    # The CIFAR benchmarks; the demo benchmark runs no attacks (it must certify in seconds).
    for definition in (d for d in packaged_definitions() if d.base_dataset != "digits"):
        stage = definition.robustness
        base = definition.base_dataset
        assert stage is not None, definition.name
        assert (stage.repo, stage.anchors) == (f"uoft-cs/{base}", f"{base}_k50_s0.safetensors")
        assert (stage.k, stage.eps, stage.n_iter, stage.n_target_classes) == (50, [8, 16], 100, 9)
        assert stage.weighting == ("pdw" if base == "cifar100" else "pd")  # superclasses
        assert stage.subset(definition.protocol) == (20, None, 500)


def test_robustness_stage_is_stored_with_its_subset(session: Session):
    doc = tiny_definition()
    doc["robustness"] = {
        "repo": "local/tiny",
        "folder": "/data/x",
        "source_size": 9,
        "skip": 2,
        "anchors": "x_k3_s0.safetensors",
        "k": 3,
        "eps": [16],
    }
    benchmark = upsert_benchmark(session, parse_definition(json.dumps(doc)))
    stored = benchmark.robustness
    assert (stored["subset_skip"], stored["subset_limit"], stored["num_images"]) == (2, None, 5)
    assert (stored["eps"], stored["projection"], stored["anchor_seed"]) == ([16], "exact", 0)
    assert stored["folder"] == "/data/x"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"eps": [4]}, "eps"),
        ({"eps": [8, 8]}, "repeats"),
        ({"eps": []}, "eps"),
        ({"anchors": "../escape.safetensors"}, "anchors"),
        ({"anchors": "bank.pt"}, "anchors"),
        ({"weighting": "dreamsim"}, "weighting"),
        ({"k": 0}, "k"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_invalid_robustness_stages(change: dict, message: str):
    doc = tiny_definition()
    doc["robustness"] = {"repo": "local/tiny", "anchors": "a.safetensors"} | change
    with pytest.raises(BenchmarkDefinitionError, match=message):
        parse_definition(json.dumps(doc))


def test_yaml_and_json_load(tmp_path):
    doc = tiny_definition()
    (tmp_path / "b.json").write_text(json.dumps(doc))
    import yaml

    (tmp_path / "b.yaml").write_text(yaml.safe_dump(doc))
    assert load_definition(tmp_path / "b.json") == load_definition(tmp_path / "b.yaml")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "other/1"}, "format"),
        ({"sigmas": []}, "sigmas"),
        ({"protocol": {"version": "v1", "alpha": 0.7}}, "alpha"),
        ({"unknown_key": 1}, "unknown_key"),
        ({"name": "Bad Name"}, "name"),
    ],
)
def test_invalid_definitions(change: dict, message: str):
    doc = tiny_definition() | change
    with pytest.raises(BenchmarkDefinitionError, match=message):
        parse_definition(json.dumps(doc))


def test_duplicate_test_set_names_refused():
    doc = tiny_definition()
    doc["test_sets"].append(dict(doc["test_sets"][0]))
    with pytest.raises(BenchmarkDefinitionError, match="repeated"):
        parse_definition(json.dumps(doc))


def test_not_json_and_missing_file(tmp_path):
    with pytest.raises(BenchmarkDefinitionError, match="not valid JSON/YAML"):
        parse_definition("{unclosed: [")
    with pytest.raises(BenchmarkDefinitionError, match="cannot be read"):
        load_definition(tmp_path / "missing.json")


def test_upsert_is_versioned(session: Session):
    first = load_tiny(session)
    assert [t.name for t in first.test_sets] == ["set0", "set1"]
    again = load_tiny(session)
    assert again.id == first.id and again.definition_version == 1
    changed = tiny_definition(sets=3)
    with pytest.raises(BenchmarkDefinitionError, match="increase `version`"):
        upsert_benchmark(session, parse_definition(json.dumps(changed)))
    changed["version"] = 2
    updated = upsert_benchmark(session, parse_definition(json.dumps(changed)))
    assert updated.id == first.id
    assert [t.name for t in updated.test_sets] == ["set0", "set1", "set2"]


def test_test_set_with_results_cannot_be_removed(session: Session, settings: Settings):
    benchmark = load_tiny(session)
    user, _ = make_user(session, "alice")
    finished_submission(session, user=user, benchmark=benchmark, settings=settings, seed=1)
    shrunk = tiny_definition(sets=1, version=2)
    with pytest.raises(BenchmarkDefinitionError, match="has results"):
        upsert_benchmark(session, parse_definition(json.dumps(shrunk)))


def test_unknown_benchmark_lists_known(session: Session):
    load_tiny(session)
    with pytest.raises(NotFoundError, match=r"known benchmarks: \['tiny'\]"):
        get_benchmark(session, "nope")
