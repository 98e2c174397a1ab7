"""``download`` and ``train`` never write into a Python package (issue 25 §3: the README's
``certbench download 12 --out models/`` put weights into the repository's ``models`` package),
and ``download`` writes to ``./certbench-models/`` by default. Refused when the command line is
parsed: no server is contacted (the one named here does not exist) and nothing is trained."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from typer.testing import CliRunner

from certbench.cli.app import app
from certbench.cli.client import register as register_client
from certbench.cli.train import register as register_train
from certbench.cli.zoo import download

runner = CliRunner()
register_client(app)
register_train(app)
REPOSITORY = Path(__file__).resolve().parents[2]
NOWHERE = "http://127.0.0.1:9"
TRAIN = ["train", "--recipe", "gaussian", "--dataset", "cifar10"]


@pytest.mark.parametrize("out", ["models", "models/", "models/zoo", "./certbench/nets"])
def test_download_refuses_the_repository_packages(monkeypatch, out: str) -> None:
    monkeypatch.chdir(REPOSITORY)
    result = runner.invoke(app, ["download", "1", "--out", out, "--server", NOWHERE])
    assert result.exit_code == 2
    assert "inside the Python package" in result.output and "certbench-models/" in result.output
    assert not (REPOSITORY / "models" / "zoo").exists()


def test_train_refuses_a_package_folder(tmp_path: Path) -> None:
    package = tmp_path / "mypackage"
    package.mkdir()
    (package / "__init__.py").write_text("")
    result = runner.invoke(app, [*TRAIN, "--out", str(package / "run")])
    assert result.exit_code == 2 and "'mypackage'" in result.output
    assert not (package / "run").exists()


def test_plain_folders_pass_and_download_defaults_to_its_own_folder(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["download", "1", "--out", str(tmp_path / "zoo"), "--server", NOWHERE]
    )
    assert "inside the Python package" not in result.output
    assert result.exit_code == 2 and "127.0.0.1:9" in result.output  # got as far as the server
    assert inspect.signature(download).parameters["out"].default == Path("certbench-models")
