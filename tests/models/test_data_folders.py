"""A definition's data ``folder`` never leaves CERTBENCH_DATASETS_DIR (issue 35 §3): a definition
naming ``../../../etc`` is refused, a row stored before the checks is never read, and the public
hint never names a folder that failed them (it told users to run ``certbench datasets demo
--folder ../../../etc``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from certbench.errors import DataSourceError
from models.benchmarks.availability import benchmark_availability, clear_cache
from models.benchmarks.folders import folder_problem, locate_folder
from models.benchmarks.sources import spec_of_test_set
from models.catalog.benchmarks import parse_definition, upsert_benchmark
from models.core.errors import BenchmarkDefinitionError
from models.core.settings import Settings
from models.db.entities import Benchmark
from models.stages.inputs import operator_advice

HOSTILE = ["../../../etc", "a/../../etc", "./etc", "/etc/../root", "a//b", "a/", "-rf", "a b",
           "$(reboot)", "a;b", "x\ny", "~root"]  # fmt: skip
FINE = ["demo-digits", "uoft-cs/cifar10", "cifar-10-c/v1.0", "/srv/data/cifar10"]


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


def _definition(folder: str, **extra: Any) -> dict[str, Any]:
    return {
        "format": "certbench-benchmark/1",
        "name": "folders",
        "version": 1,
        "title": "folders",
        "base_dataset": "cifar10",
        "num_classes": 10,
        "sigmas": [0.25],
        "protocol": {"version": "t-v1", "n0": 4, "n": 16, "skip": 2},
        "test_sets": [
            {"name": "clean", "repo": "certbench/demo-digits", "folder": folder, "source_size": 6}
        ],
        **extra,
    }


@pytest.mark.parametrize("folder", HOSTILE)
def test_a_folder_that_could_leave_the_data_directory_is_no_folder(folder: str):
    problem = folder_problem(folder)
    assert problem is not None and folder not in problem
    with pytest.raises(BenchmarkDefinitionError, match="data folder"):
        parse_definition(json.dumps(_definition(folder)))


@pytest.mark.parametrize("folder", FINE)
def test_plain_folders_and_operator_paths_are_folders(folder: str):
    assert folder_problem(folder) is None
    parse_definition(json.dumps(_definition(folder)))


def test_a_stage_block_folder_is_checked_like_a_test_set_folder():
    stage = {"fourier_sensitivity": {"protocol": "quick", "repo": "x/y", "folder": "../up"}}
    with pytest.raises(
        BenchmarkDefinitionError, match=r"(?s)stages.fourier_sensitivity:.*folder.*`..` segment"
    ):
        parse_definition(json.dumps(_definition("demo-digits", stages=stage)))


def test_a_symbolic_link_out_of_the_data_directory_is_never_followed(tmp_path: Path):
    root, outside = tmp_path / "datasets", tmp_path / "private"
    root.mkdir()
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    (root / "inside").symlink_to(root)
    escaped = locate_folder("escape/sub", root)
    assert escaped.refused is not None and "symbolic link" in escaped.refused
    assert str(tmp_path) not in escaped.refused
    assert locate_folder("inside/sub", root).refused is None
    assert locate_folder("missing/sub", root).refused is None  # missing: reported as missing


def _stored_before_the_checks(session: Session, folder: str) -> Benchmark:
    """A benchmark whose test set row names ``folder`` as a row written before the folder
    checks could hold it (the definition itself is loaded with a plain folder)."""
    benchmark = upsert_benchmark(session, parse_definition(json.dumps(_definition("later"))))
    benchmark.test_sets[0].dataset_folder = folder
    session.flush()
    return benchmark


@pytest.mark.parametrize("folder", ["../../../etc", "a/../../etc"])
def test_a_stored_hostile_folder_is_not_echoed_nor_read(
    session: Session, settings: Settings, folder: str
):
    benchmark = _stored_before_the_checks(session, folder)
    found = benchmark_availability(benchmark, settings)
    assert not found.available
    hint, command = found.hint or "", found.command or ""
    assert folder not in hint and folder not in command and "--folder" not in command
    assert "stays in CERTBENCH_DATASETS_DIR" in hint
    spec = spec_of_test_set(benchmark.test_sets[0], settings)
    assert spec.refused is not None and spec.source == "certbench/demo-digits"
    with pytest.raises(DataSourceError) as info, operator_advice(spec):
        pytest.fail("the folder was read")
    assert folder not in str(info.value) and str(settings.datasets_dir) not in str(info.value)


def test_a_folder_linked_out_of_the_data_directory_is_refused_where_it_is_read(
    session: Session, settings: Settings, tmp_path: Path
):
    assert settings.datasets_dir is not None
    outside = tmp_path / "outside"
    outside.mkdir()
    settings.datasets_dir.mkdir(parents=True, exist_ok=True)
    (settings.datasets_dir / "linked").symlink_to(outside)
    benchmark = _stored_before_the_checks(session, "linked")
    found = benchmark_availability(benchmark, settings)
    assert not found.available and "symbolic link" in (found.hint or "")
    assert str(tmp_path) not in (found.hint or "")
    assert spec_of_test_set(benchmark.test_sets[0], settings).refused is not None
