"""``certbench benchmarks pin``: each test set of a definition pinned to the bytes of a local
published folder (written by the generators' own writer), the version bumped, nothing written
when a config is missing or its bytes contradict the folder's checksum."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
import yaml
from typer.testing import CliRunner

from api.commands import register
from certbench.data.provenance import config_sha256
from generators import hub
from models.catalog.benchmarks import load_definition

CONFIGS = ("fog_s1", "fog_s2")
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _published(folder: Path) -> Path:
    """A generated folder: one checksummed shard per config and a card listing them."""
    rng = np.random.default_rng(0)
    for config in CONFIGS:
        hub.write_config(folder, config, images=rng.integers(0, 256, (4, 32, 32, 3), np.uint8),
                         labels=np.arange(4), class_names=[f"c{i}" for i in range(10)],
                         columns={"severity": np.ones(4, np.int32)},
                         source_index=np.arange(4))  # fmt: skip
    card = hub.build_card(configs=list(CONFIGS), pretty_name="T", body="x", license="other")
    hub.write_card(folder, card)
    return folder


def _definition(path: Path, **test_set: Any) -> Path:
    definition = {
        "format": "certbench-benchmark/1", "name": "pinme", "version": 3, "title": "Pin me",
        "description": "α ∈ {0.5}", "base_dataset": "cifar10", "num_classes": 10,
        "sigmas": [0.25], "protocol": {"version": "t-v1", "n0": 4, "n": 16, "skip": 2},
        "provenance": {"generator": "cifar_c", "generation_seed": 0, "source": "uoft-cs/cifar10"},
        "test_sets": [{"name": c, "repo": "org/set", "config": c, "source_size": 4, **test_set}
                      for c in CONFIGS],
    }  # fmt: skip
    path.write_text(json.dumps(definition, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def _pin(*args: str) -> Any:
    app = typer.Typer()
    register(app)
    return CliRunner().invoke(app, ["benchmarks", "pin", *args])


def test_every_test_set_is_pinned_to_its_config_bytes_and_the_version_bumped(tmp_path: Path):
    data = _published(tmp_path / "out")
    path = _definition(tmp_path / "pinme.json")
    done = _pin(str(path), "--data", str(data), "--hub-commit", COMMIT)
    assert done.exit_code == 0, done.output
    assert f"version 4, 2 test set(s) pinned by sha256 and Hub commit {COMMIT}" in done.output
    pinned = load_definition(path)
    assert pinned.version == 4 and pinned.provenance.generator == "cifar_c"  # defaults kept
    for test_set in pinned.test_sets:
        sha256 = config_sha256(data, test_set.config)
        assert sha256 == hub.read_checksum(data, test_set.config)["sha256"]
        assert test_set.provenance.model_dump(exclude_none=True) == {
            "sha256": sha256, "hub_commit": COMMIT,
        }  # fmt: skip
    text = path.read_text(encoding="utf-8")
    assert text.startswith('{\n "format"') and "α ∈ {0.5}" in text  # the packaged files' style


def test_the_pinned_copy_can_go_elsewhere_and_in_yaml(tmp_path: Path):
    data = _published(tmp_path / "out")
    path = _definition(tmp_path / "pinme.json")
    before = path.read_text(encoding="utf-8")
    done = _pin(str(path), "--data", str(data), "--out", str(tmp_path / "pinned.yaml"))
    assert done.exit_code == 0, done.output
    assert "without --hub-commit, workers verify only local copies" in done.output
    assert path.read_text(encoding="utf-8") == before
    written = yaml.safe_load((tmp_path / "pinned.yaml").read_text(encoding="utf-8"))
    assert written["version"] == 4
    assert [t["provenance"] for t in written["test_sets"]] == [
        {"sha256": config_sha256(data, c)} for c in CONFIGS
    ]


def test_a_missing_config_refuses_and_writes_nothing(tmp_path: Path):
    data = _published(tmp_path / "out")
    path = _definition(tmp_path / "pinme.json")
    raw = json.loads(path.read_text(encoding="utf-8"))
    raw["test_sets"].append({**raw["test_sets"][0], "name": "snow_s1", "config": "snow_s1"})
    path.write_text(json.dumps(raw), encoding="utf-8")
    before = path.read_text(encoding="utf-8")
    refused = _pin(str(path), "--data", str(data))
    assert refused.exit_code == 1
    assert "cannot pin 1 of 3 test set(s)" in refused.output
    assert "nothing was written" in refused.output
    assert "test set 'snow_s1' (config 'snow_s1', split 'test'): unknown config" in refused.output
    assert path.read_text(encoding="utf-8") == before


def test_bytes_that_contradict_the_checksum_or_a_revision_refuse(tmp_path: Path):
    data = _published(tmp_path / "out")
    shard = hub.shard_path(data, CONFIGS[1])
    shard.write_bytes(shard.read_bytes() + b"\0")  # changed after generation
    refused = _pin(str(_definition(tmp_path / "a.json")), "--data", str(data))
    assert refused.exit_code == 1
    assert f"test set '{CONFIGS[1]}'" in refused.output
    assert "checksum.json records" in refused.output
    fine = _published(tmp_path / "fine")
    revision = _definition(tmp_path / "b.json", revision="main")
    refused = _pin(str(revision), "--data", str(fine), "--hub-commit", COMMIT)
    assert refused.exit_code == 1 and "differs from provenance.hub_commit" in refused.output


def test_a_commit_must_be_a_full_commit_id(tmp_path: Path):
    data = _published(tmp_path / "out")
    refused = _pin(str(_definition(tmp_path / "a.json")), "--data", str(data), "--hub-commit",
                   COMMIT[:10])  # fmt: skip
    assert refused.exit_code == 1 and "hub_commit" in refused.output


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_the_packaged_clean_definitions_pin_their_hub_data(name: str) -> None:
    """The commits and SHA-256 values public sources give for uoft-cs/cifar10 and cifar100
    (their LFS object ids), written into the packaged definitions and the pinned sources."""
    from certbench.data.pins import PINNED_SOURCES
    from models.catalog.benchmarks import packaged_definitions

    facts = {
        "cifar10": ("uoft-cs/cifar10", "0b2714987fa478483af9968de7c934580d0bb9a2",
                    "841389e6f2d64f28bf17310e430aebac20ec3ba611a3c5e231dc93c645ce84de"),
        "cifar100": ("uoft-cs/cifar100", "aadb3af77e9048adbea6b47c21a81e47dd092ae5",
                     "98776c529bb146a9c791229df74a5cf076be9b43d82dbbd334b6a7788d73dc68"),
    }  # fmt: skip
    repo, commit, test_sha256 = facts[name]
    assert PINNED_SOURCES[repo].commit == commit
    assert PINNED_SOURCES[repo].sha256("test") == test_sha256
    definitions = {d.name: d for d in packaged_definitions()}
    (clean,) = definitions[name].test_sets
    assert clean.repo == repo and clean.split == "test"
    assert clean.provenance is not None
    assert (clean.provenance.hub_commit, clean.provenance.sha256) == (commit, test_sha256)
    for stage, block in definitions[name].stages.items():
        assert block["repo"] == repo and block["split"] == "test", stage
        assert block["provenance"]["hub_commit"] == commit, stage
        assert block["provenance"]["sha256"] == test_sha256, stage


def test_every_packaged_read_of_the_hub_cifar_copies_is_pinned() -> None:
    """Stage blocks reading uoft-cs/cifar10 or cifar100 pin the commit and the test shard's
    hash; a definition built from them names the commit the generators read by default."""
    from certbench.data.pins import PINNED_SOURCES, default_revision
    from models.catalog.benchmarks import packaged_definitions

    checked = 0
    for definition in packaged_definitions():
        for stage, block in definition.stages.items():
            pin = PINNED_SOURCES.get(block.get("repo"))
            if pin is not None and not block.get("folder"):
                expected = {"hub_commit": pin.commit, "sha256": pin.sha256(block["split"])}
                assert {k: block["provenance"][k] for k in expected} == expected, (
                    definition.name,
                    stage,
                )
                checked += 1
        source = definition.provenance.source if definition.provenance else None
        if source in PINNED_SOURCES:
            assert definition.provenance.source_revision == default_revision(source, None)
            checked += 1
    assert checked == 24  # 16 stage blocks; 8 definitions (clean, -F, -C̄, weather) × 2
