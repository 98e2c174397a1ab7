"""Benchmark definitions: packaged files, validation, versioned upserts."""

from __future__ import annotations

import json

import pytest
from service_factories import finished_submission, load_tiny, make_user, tiny_definition
from sqlalchemy.orm import Session

from models.catalog import (
    get_benchmark,
    load_definition,
    packaged_definitions,
    parse_definition,
    upsert_benchmark,
)
from models.errors import BenchmarkDefinitionError, NotFoundError
from models.settings import Settings


def test_packaged_definitions():
    definitions = {d.name: d for d in packaged_definitions()}
    assert set(definitions) == {
        f"{base}{suffix}"
        for base in ("cifar10", "cifar100")
        for suffix in ("", "-c", "-c-bar", "-f")
    }
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
