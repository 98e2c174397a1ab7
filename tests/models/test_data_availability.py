"""Whether a benchmark's data is on this machine: local folders, local copies of Hub repos
(``<datasets_dir>/<org>/<name>``), the ``datasets`` cache, generated data sets; decided without
the network, cached, and worded without local paths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from certbench.data.sources import load_images
from models.benchmarks import availability as data_availability
from models.benchmarks.availability import (
    benchmark_availability,
    clear_cache,
    datasets_cache_dir,
    datasets_cache_has,
)
from models.benchmarks.sources import dataset_source, hub_mirror, resolve_source
from models.catalog.benchmarks import parse_definition, upsert_benchmark
from models.core.settings import Settings
from models.db.entities import Benchmark
from tests.support.data_layouts import (
    CIFAR10_CLASSES,
    random_images,
    random_labels,
    write_hub_folder,
)


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


def _definition(name: str, test_sets: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "format": "certbench-benchmark/1",
        "name": name,
        "version": 1,
        "title": name,
        "base_dataset": "cifar10",
        "num_classes": 10,
        "sigmas": [0.25],
        "protocol": {"version": "t-v1", "n0": 4, "n": 16, "skip": 2},
        "test_sets": test_sets,
        **extra,
    }


def _load(session: Session, name: str, test_sets: list[dict[str, Any]], **extra: Any) -> Benchmark:
    return upsert_benchmark(
        session, parse_definition(json.dumps(_definition(name, test_sets, **extra)))
    )


def _cifar10_copy(folder: Path) -> None:
    """A local copy laid out like the Hub repo uoft-cs/cifar10 (``plain_text/test-*.parquet``,
    columns ``img``/``label``), as `hf download` writes it."""
    write_hub_folder(
        folder,
        "plain_text",
        random_images(6),
        random_labels(6, 10),
        class_names=CIFAR10_CLASSES,
        data_dir="",
        image_column="img",
    )


def test_a_hub_repo_is_here_once_its_local_copy_is(session: Session, settings: Settings):
    benchmark = _load(
        session, "hubby", [{"name": "clean", "repo": "uoft-cs/cifar10", "source_size": 6}]
    )
    missing = benchmark_availability(benchmark, settings)
    assert not missing.available and missing.missing_repos == ("uoft-cs/cifar10",)
    assert missing.command == "certbench datasets fetch cifar10"  # the alias, as users type it
    assert "`certbench datasets fetch cifar10`" in (missing.hint or "")
    assert str(settings.datasets_dir) not in (missing.hint or "")
    (test_set,) = benchmark.test_sets
    assert dataset_source(test_set, settings) == "uoft-cs/cifar10"

    mirror = hub_mirror("uoft-cs/cifar10", settings)
    assert mirror == settings.datasets_dir / "uoft-cs" / "cifar10"
    _cifar10_copy(mirror)
    assert not benchmark_availability(benchmark, settings).available  # cached answer
    clear_cache()
    here = benchmark_availability(benchmark, settings)
    assert here.available and here.hint is None and here.command is None
    assert dataset_source(test_set, settings) == str(mirror)  # the worker reads the copy
    images = load_images(dataset_source(test_set, settings), split="test")
    assert len(images) == 6 and images.class_names == CIFAR10_CLASSES


def test_a_pinned_revision_is_never_read_from_an_unversioned_copy(
    session: Session, settings: Settings
):
    sets = [{"name": "clean", "repo": "uoft-cs/cifar10", "revision": "v1.0", "source_size": 6}]
    benchmark = _load(session, "pinned", sets)
    _cifar10_copy(hub_mirror("uoft-cs/cifar10", settings))
    (test_set,) = benchmark.test_sets
    assert dataset_source(test_set, settings) == "uoft-cs/cifar10"
    assert resolve_source(None, "uoft-cs/cifar10", settings) != "uoft-cs/cifar10"
    assert not benchmark_availability(benchmark, settings).available


def test_missing_folders_are_named_without_the_machine_paths(
    session: Session, settings: Settings, tmp_path: Path
):
    secret = tmp_path / "srv" / "private" / "cifar10-c-local"
    sets = [
        {"name": "a", "repo": "x/a", "folder": "relative-set", "source_size": 6},
        {"name": "b", "repo": "x/b", "folder": str(secret), "source_size": 6},
    ]
    benchmark = _load(session, "folders", sets)
    found = benchmark_availability(benchmark, settings)
    assert not found.available and found.missing_repos == ()
    assert found.missing_folders == ("relative-set", "cifar10-c-local")
    # the relative folder's fix is one command; the absolute one's path is never shown
    assert found.command == "certbench datasets fetch x/a --folder relative-set"
    hint = found.hint or ""
    assert "folder 'relative-set' (x/a) is missing under CERTBENCH_DATASETS_DIR" in hint
    assert "folder …/cifar10-c-local (x/b) is missing: copy the data to the definition's" in hint
    assert "hf download x/b --repo-type dataset --local-dir DIR" in hint
    assert str(tmp_path) not in hint and str(tmp_path) not in found.command
    (settings.datasets_dir / "relative-set").mkdir(parents=True)
    secret.mkdir(parents=True)
    clear_cache()
    assert benchmark_availability(benchmark, settings).available


def test_a_stage_block_source_counts_and_a_generated_folder_is_always_here(
    session: Session, settings: Settings
):
    sets = [
        {
            "name": "clean",
            "repo": "certbench/demo-digits",
            "folder": "demo-digits",
            "source_size": 364,
        }
    ]
    stage = {
        "fourier_sensitivity": {"protocol": "quick", "smoothed": False, "repo": "uoft-cs/cifar10"}
    }
    benchmark = _load(session, "staged", sets, stages=stage)
    found = benchmark_availability(benchmark, settings)
    assert not (settings.datasets_dir / "demo-digits").exists()  # generated when needed
    assert found.missing_repos == ("uoft-cs/cifar10",) and found.missing_folders == ()
    assert found.command == "certbench datasets fetch cifar10"


def test_generated_data_under_another_folder_is_written_by_its_command(
    session: Session, settings: Settings
):
    """The demo digits named under a folder the service does not write itself (only
    ``demo-digits`` is written on start): the fix is the command that writes them there."""
    sets = [{"name": "c", "repo": "certbench/demo-digits", "folder": "digits", "source_size": 364}]
    found = benchmark_availability(_load(session, "digits", sets), settings)
    assert found.missing_folders == ("digits",)
    assert found.command == "certbench datasets demo --folder digits"
    assert "(no network needed)" in (found.hint or "") and "hf download" not in (found.hint or "")


def test_a_missing_hub_repo_and_folder_get_one_shell_line(session: Session, settings: Settings):
    sets = [
        {"name": "a", "repo": "uoft-cs/cifar10", "source_size": 6},
        {"name": "b", "repo": "x/b", "folder": "b-local", "source_size": 6},
    ]
    found = benchmark_availability(_load(session, "both", sets), settings)
    assert found.command == (
        "certbench datasets fetch cifar10 && certbench datasets fetch x/b --folder b-local"
    )


def test_the_datasets_cache_check_agrees_with_datasets_own_offline_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from datasets.load import CachedDatasetModuleFactory

    cache = tmp_path / "hf-datasets"
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))

    def factory_finds(repo: str) -> bool:
        try:
            CachedDatasetModuleFactory(repo, cache_dir=str(cache)).get_module()
        except FileNotFoundError:
            return False
        return True

    cases = [("uoft-cs/cifar10", None), ("uoft-cs/cifar10", "plain_text"), ("org/CamelName", None)]
    for repo, config in cases:
        assert datasets_cache_has(repo, config) is factory_finds(repo) is False
    # What load_dataset leaves: <org>___<snake_case name>/<config>/<version>/<hash>/
    (cache / "uoft-cs___cifar10" / "plain_text" / "0.0.0" / "0a1b2c").mkdir(parents=True)
    (cache / "org___camel_name" / "default" / "0.0.0" / "3d4e").mkdir(parents=True)
    for repo, config in cases:
        assert datasets_cache_has(repo, config) is factory_finds(repo) is True
    assert not datasets_cache_has("uoft-cs/cifar10", "another_config")
    assert not datasets_cache_has("uoft-cs/cifar100", None)


def test_the_datasets_cache_dir_is_the_one_datasets_derives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    import importlib

    from datasets import config as datasets_config

    cases = [
        {},
        {"XDG_CACHE_HOME": str(tmp_path / "xdg")},
        {"HF_HOME": str(tmp_path / "hf")},
        {"HF_HOME": str(tmp_path / "hf"), "HF_DATASETS_CACHE": str(tmp_path / "ds")},
    ]
    try:
        for env in cases:
            for key in ("XDG_CACHE_HOME", "HF_HOME", "HF_DATASETS_CACHE"):
                monkeypatch.delenv(key, raising=False)
            for key, value in env.items():
                monkeypatch.setenv(key, value)
            derived = importlib.reload(datasets_config).HF_DATASETS_CACHE
            assert datasets_cache_dir() == Path(derived), env
    finally:
        monkeypatch.undo()
        importlib.reload(datasets_config)  # the real environment's values again


def test_answers_are_cached_per_definition_version(session: Session, settings: Settings):
    sets = [{"name": "clean", "repo": "uoft-cs/cifar10", "source_size": 6}]
    benchmark = _load(session, "cached", sets)
    first = benchmark_availability(benchmark, settings)
    assert benchmark_availability(benchmark, settings) is first
    key = (benchmark.id, benchmark.definition_sha256, str(settings.datasets_dir))
    assert key in data_availability._cache
    changed = _definition("cached", [{**sets[0], "folder": "here"}])
    changed["version"] = 2
    (settings.datasets_dir / "here").mkdir(parents=True)
    benchmark = upsert_benchmark(session, parse_definition(json.dumps(changed)))
    assert benchmark_availability(benchmark, settings).available  # a new version: asked again


COMMIT = "0b2714987fa478483af9968de7c934580d0bb9a2"  # uoft-cs/cifar10's pinned commit


def _pinned_set(sha256: str) -> dict[str, Any]:
    return {
        "name": "clean",
        "repo": "uoft-cs/cifar10",
        "source_size": 6,
        "provenance": {"hub_commit": COMMIT, "sha256": sha256},
    }


def _copy_sha256(folder: Path, *, seed: int = 0) -> str:
    """Write the uoft-cs/cifar10 layout with images drawn from ``seed``; its test shard's hash."""
    from certbench.data.provenance import config_sha256

    write_hub_folder(folder, "plain_text", random_images(6, seed=seed), random_labels(6, 10),
                     class_names=CIFAR10_CLASSES, data_dir="", image_column="img")  # fmt: skip
    return config_sha256(folder, None, "test")


def test_a_pinned_local_copy_is_here_only_with_the_pinned_bytes(
    session: Session, settings: Settings
):
    mirror = hub_mirror("uoft-cs/cifar10", settings)
    pinned = _copy_sha256(settings.datasets_dir / "published")
    benchmark = _load(session, "pinned-copy", [_pinned_set(pinned)])
    missing = benchmark_availability(benchmark, settings)
    assert missing.missing_repos == ("uoft-cs/cifar10",)
    assert missing.command == "certbench datasets fetch cifar10"
    assert _copy_sha256(mirror) == pinned
    clear_cache()
    assert benchmark_availability(benchmark, settings).available  # the copy, verified
    (test_set,) = benchmark.test_sets
    assert dataset_source(test_set, settings) == str(mirror)
    found = _copy_sha256(mirror, seed=5)
    clear_cache()
    stale = benchmark_availability(benchmark, settings)
    assert not stale.available and stale.missing_repos == ()
    assert stale.command == "certbench datasets fetch cifar10 --force"
    hint = stale.hint or ""
    assert f"data here differs from the pinned bytes: sha256 {found}, pinned {pinned}" in hint
    assert (
        hint.startswith("uoft-cs/cifar10: ")
        and "`certbench datasets fetch cifar10 --force`" in hint
    )
    assert str(settings.datasets_dir) not in hint


def test_a_copy_is_hashed_once_per_version_of_its_files(session: Session, settings: Settings):
    import os

    mirror = hub_mirror("uoft-cs/cifar10", settings)
    benchmark = _load(session, "hashed-once", [_pinned_set(_copy_sha256(mirror))])
    assert benchmark_availability(benchmark, settings).available
    shard = mirror / "plain_text" / "test-00000-of-00001.parquet"
    before = shard.stat()
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # other bytes, same size
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the same mtime
    clear_cache()
    assert benchmark_availability(benchmark, settings).available  # not hashed again
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
    clear_cache()
    changed = benchmark_availability(benchmark, settings)
    assert not changed.available and "differs from the pinned bytes" in (changed.hint or "")


def test_pinned_stage_images_and_pinned_folders_are_checked(session: Session, settings: Settings):
    mirror = hub_mirror("uoft-cs/cifar10", settings)
    here = _copy_sha256(mirror)
    folder = settings.datasets_dir / "my-set"
    other = _copy_sha256(folder, seed=3)
    stage = {"fourier_sensitivity": {
        "protocol": "quick", "smoothed": False, "repo": "uoft-cs/cifar10",
        "provenance": {"hub_commit": COMMIT, "sha256": "0" * 64},
    }}  # fmt: skip
    sets = [{**_pinned_set(here), "name": "a"},
            {"name": "b", "repo": "x/b", "folder": "my-set", "source_size": 6,
             "provenance": {"sha256": "1" * 64}}]  # fmt: skip
    found = benchmark_availability(_load(session, "pinned-stage", sets, stages=stage), settings)
    assert not found.available
    assert [(m.name, m.repo) for m in found.mismatched] == [
        ("my-set", None),
        ("uoft-cs/cifar10", "uoft-cs/cifar10"),
    ]
    hint = found.hint or ""
    assert f"sha256 {other}, pinned {'1' * 64}" in hint and "certbench benchmarks pin" in hint
    assert f"sha256 {here}, pinned {'0' * 64}" in hint
    assert str(settings.datasets_dir) not in hint
