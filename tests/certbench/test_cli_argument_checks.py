"""certify/predict refuse impossible numbers before loading anything, and warn on useless ones.

Issue 25 §4: ``certify --sigma -1`` failed clearly but only after loading the model and data
(17 s); ``--sigma 1e6`` ran to 100 % abstention without a word. The loaders are replaced by ones
that record their call, so each test shows whether the check came first.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import certbench.data
import certbench.nets
from certbench.cli.app import app
from certbench.errors import CertbenchError

runner = CliRunner()
LOADED = "the loader was called"
FILES = ["--weights", "w.safetensors", "--manifest", "m.json", "--dataset", "cifar10"]


@pytest.fixture
def loaders(monkeypatch) -> list[str]:
    """Every loader raises (a CertbenchError: exit 2 with LOADED) and records its name."""
    calls: list[str] = []

    def loader(name: str):
        def load(*args, **kwargs):
            calls.append(name)
            raise CertbenchError(LOADED)

        return load

    monkeypatch.setattr(certbench.nets, "load_manifest", loader("load_manifest"))
    monkeypatch.setattr(certbench.nets, "load_model", loader("load_model"))
    monkeypatch.setattr(certbench.data, "load_images", loader("load_images"))
    return calls


def certify(*extra: str):
    return runner.invoke(app, ["certify", *FILES, "--out", "r.parquet", *extra])


def predict(*extra: str):
    return runner.invoke(app, ["predict", *FILES, *extra])


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--sigma", "-1"], "must be a finite number > 0"),
        (["--sigma", "0"], "must be a finite number > 0"),
        (["--sigma", "nan"], "must be a finite number > 0"),
        (["--alpha", "0"], "must lie in (0, 1)"),
        (["--alpha", "1.5"], "must lie in (0, 1)"),
        (["--n", "0"], "--n"),
        (["--n0", "0"], "--n0"),
        (["--batch-size", "0"], "--batch-size"),
        (["--skip", "0"], "--skip"),
        (["--limit", "0"], "--limit"),
    ],
)
def test_impossible_values_are_refused_before_any_loading(loaders, args, says) -> None:
    result = certify(*args)
    assert result.exit_code == 2, result.output
    assert says in result.output and LOADED not in result.output
    assert loaders == []
    if args[0] != "--n0":  # predict has no selection step
        again = predict(*args)
        assert again.exit_code == 2 and says in again.output and loaders == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--sigma", "1e6"], "the noise buries every image"),
        (["--alpha", "0.3"], "the papers use 0.001"),
        (["--n", "5"], "can never certify"),
    ],
)
def test_useless_values_warn_first_and_the_run_goes_on(loaders, args, says) -> None:
    result = certify(*args)
    assert says in result.output
    assert result.output.index(says) < result.output.index(LOADED)
    assert loaders  # the run went on to load the model


def test_sensible_values_say_nothing(loaders) -> None:
    result = certify("--sigma", "0.5", "--n", "10", "--alpha", "0.001")
    assert "warning" not in result.output and LOADED in result.output
