"""``certbench datasets fetch``: Hub ids and aliases, where copies go, and a clear failure
without network (no half-written copy left behind)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from certbench.dataset_commands import register
from certbench.errors import DataSourceError
from certbench.hub_fetch import default_datasets_dir, fetch_dataset, hub_repo, mirror_path


def test_aliases_and_ids():
    assert hub_repo("cifar10") == "uoft-cs/cifar10"
    assert hub_repo("cifar100") == "uoft-cs/cifar100"
    assert hub_repo("certbench/cifar10-c") == "certbench/cifar10-c"
    for bad in ("a/b/c", "../x", "x/..", "org/"):
        with pytest.raises(DataSourceError, match="not a Hub dataset id"):
            hub_repo(bad)
    with pytest.raises(DataSourceError, match="did you mean cifar10"):
        hub_repo("cifr10")
    assert mirror_path("cifar10", Path("/d")) == Path("/d/uoft-cs/cifar10")


def test_the_default_datasets_dir_follows_the_service_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv("CERTBENCH_DATASETS_DIR", raising=False)
    monkeypatch.delenv("CERTBENCH_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_datasets_dir() == (tmp_path / "certbench-data" / "datasets").resolve()
    monkeypatch.setenv("CERTBENCH_DATA_DIR", str(tmp_path / "data"))
    assert default_datasets_dir() == tmp_path / "data" / "datasets"
    monkeypatch.setenv("CERTBENCH_DATASETS_DIR", str(tmp_path / "elsewhere"))
    assert default_datasets_dir() == tmp_path / "elsewhere"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def offline_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_ENDPOINT at a local port nobody listens on: every Hub request is refused at once."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")


def test_without_network_the_fetch_fails_clearly(tmp_path: Path, offline_hub: None):
    with pytest.raises(DataSourceError) as caught:
        fetch_dataset("cifar10", tmp_path)
    message = str(caught.value)
    assert "could not download uoft-cs/cifar10" in message
    assert "hf download uoft-cs/cifar10 --repo-type dataset" in message
    assert str(tmp_path / "uoft-cs" / "cifar10") in message  # where to put a copy
    assert not (tmp_path / "uoft-cs" / "cifar10").exists()


def test_an_existing_copy_is_kept(tmp_path: Path, offline_hub: None):
    copy = tmp_path / "uoft-cs" / "cifar10"
    copy.mkdir(parents=True)
    fetched = fetch_dataset("cifar10", tmp_path)
    assert fetched.already_there and fetched.path == copy


def test_the_command_checks_every_name_first_and_reports_failures(
    tmp_path: Path, offline_hub: None
):
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    bad = runner.invoke(
        app, ["datasets", "fetch", "cifar10", "nonsense", "--datasets-dir", str(tmp_path)]
    )
    assert bad.exit_code == 2 and "unknown dataset 'nonsense'" in bad.output
    failed = runner.invoke(app, ["datasets", "fetch", "cifar10", "--datasets-dir", str(tmp_path)])
    assert failed.exit_code == 2 and "could not download uoft-cs/cifar10" in failed.output
    (tmp_path / "uoft-cs" / "cifar100").mkdir(parents=True)
    done = runner.invoke(app, ["datasets", "fetch", "cifar100", "--datasets-dir", str(tmp_path)])
    assert done.exit_code == 0 and "uoft-cs/cifar100: already there" in done.output


def test_fetch_into_a_definition_folder(tmp_path: Path, offline_hub: None):
    """``--folder``: the copy a test set's ``folder`` names (under the datasets dir), the fix the
    service prints for such a folder."""
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    root = ["--datasets-dir", str(tmp_path)]
    failed = runner.invoke(app, ["datasets", "fetch", "x/b", "--folder", "b-local", *root])
    assert failed.exit_code == 2 and "could not download x/b" in failed.output
    assert str(tmp_path / "b-local") in " ".join(failed.output.split())  # where a copy goes
    assert not (tmp_path / "b-local").exists()
    (tmp_path / "b-local").mkdir()
    done = runner.invoke(app, ["datasets", "fetch", "x/b", "--folder", "b-local", *root])
    assert done.exit_code == 0 and f"x/b: already there at {tmp_path / 'b-local'}" in done.output
    two = runner.invoke(app, ["datasets", "fetch", "x/a", "x/b", "--folder", "b", *root])
    assert two.exit_code == 2 and "--folder takes one dataset" in two.output
    climbing = runner.invoke(app, ["datasets", "fetch", "x/b", "--folder", "../up", *root])
    assert climbing.exit_code == 2 and "without '..'" in climbing.output


def test_demo_into_a_definition_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    neither = runner.invoke(app, ["datasets", "demo"])
    assert neither.exit_code == 2 and "exactly one of --out and --folder" in neither.output
    monkeypatch.setenv("CERTBENCH_DATASETS_DIR", str(tmp_path / "sets"))
    done = runner.invoke(app, ["datasets", "demo", "--folder", "digits"])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "sets" / "digits" / "README.md").is_file()
