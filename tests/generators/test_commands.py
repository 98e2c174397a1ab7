"""``certbench generate cifar-f`` and ``certbench publish`` through the real CLI app."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from huggingface_hub import constants
from typer.testing import CliRunner

from certbench.data.sources import list_configs, load_images
from generators import commands
from tests.support import timing
from tests.support.cifar_f_sources import write_cifar10


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    """A fresh app with only this plugin, as certbench.cli.app.register_plugins would mount it."""
    cli = typer.Typer()

    @cli.callback()
    def main() -> None:  # a callback keeps sub-commands as named commands
        pass

    commands.register(cli)
    return cli


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cifar10(tmp_path_factory.mktemp("src"), n=10)


def _generate(app: typer.Typer, source: Path, out: Path, *extra: str):
    args = ["generate", "cifar-f", "--dataset", "cifar10", "--source", str(source)]
    return CliRunner().invoke(app, [*args, "--out", str(out), *extra])


def test_generate_then_resume(app: typer.Typer, source: Path, tmp_path: Path) -> None:
    flags = ("--alphas", "0.5,3", "--fcs", "4", "--severities", "2", "--limit", "6")
    result = _generate(app, source, tmp_path, *flags, "--protocol", "reference")
    assert result.exit_code == 0, result.output
    assert "wrote 2 test sets (12 images)" in result.output
    assert list_configs(tmp_path) == ["fc04_a0p5_s2", "fc04_a3_s2"]
    loaded = load_images(tmp_path, config="fc04_a3_s2")
    assert len(loaded) == 6 and set(loaded.extra["eps"]) == {10.0}
    again = _generate(app, source, tmp_path, *flags, "--protocol", "reference")
    assert again.exit_code == 0 and "skipped 2 already complete" in again.output


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--alphas", "0.7"), "unknown alpha [0.7]"),
        (("--alphas", "0.1"), "--extra-alphas"),
        (("--fcs", "0,3"), "unknown f_c [0]"),
        (("--severities", "5"), "unknown severity [5]"),
        (("--alphas", "x"), "not a comma-separated list"),
        (("--protocol", "fast"), "--protocol 'fast' is unknown"),
        # refused when parsed (typer's range check), before any source is read
        (("--batch-size", "0"), "'--batch-size': Input should be greater than or equal to 1"),
    ],
)
def test_bad_arguments_exit_cleanly(
    app: typer.Typer, source: Path, tmp_path: Path, flags: tuple[str, ...], message: str
) -> None:
    result = _generate(app, source, tmp_path, *flags)
    assert result.exit_code == 2
    assert message in " ".join(result.output.replace("│", " ").split())  # rich's error box
    assert "Traceback" not in result.output
    assert not (tmp_path / "data").exists()


def test_missing_source_and_wrong_dataset_exit_cleanly(
    app: typer.Typer, source: Path, tmp_path: Path
) -> None:
    missing = _generate(app, tmp_path / "nope", tmp_path / "out")
    assert missing.exit_code == 2 and "does not exist" in missing.output
    wrong = CliRunner().invoke(
        app,
        ["generate", "cifar-f", "--dataset", "cifar100", "--source", str(source),
         "--out", str(tmp_path / "o")],
    )  # fmt: skip
    assert wrong.exit_code == 2 and "10 classes but --dataset cifar100" in wrong.output


def _published_folder(app: typer.Typer, source: Path, out: Path) -> Path:
    flags = ("--alphas", "2", "--fcs", "1", "--severities", "1", "--limit", "3")
    assert _generate(app, source, out, *flags).exit_code == 0
    return out


def test_publish_dry_run_lists_the_plan(app: typer.Typer, source: Path, tmp_path: Path) -> None:
    folder = _published_folder(app, source, tmp_path)
    result = CliRunner().invoke(app, ["publish", str(folder), "--repo", "me/x", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "+ data/fc01_a2_s1/test-00000-of-00001.parquet" in result.output
    assert "+ README.md" in result.output and "images/sample_grid.png" in result.output
    assert "dry run: would upload 5 files" in " ".join(result.output.split())  # 2 data, 2 fig


def test_publish_without_network_fails_clearly(
    app: typer.Typer, source: Path, tmp_path: Path, monkeypatch
) -> None:
    folder = _published_folder(app, source, tmp_path)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    result = CliRunner().invoke(app, ["publish", str(folder), "--repo", "me/x"])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "cannot reach the Hugging Face Hub to publish 'me/x'" in text
    assert "--dry-run" in text and "Traceback" not in result.output


@pytest.mark.slow
def test_publish_offline_through_the_installed_command(
    app: typer.Typer, source: Path, tmp_path: Path
) -> None:
    """The real ``certbench`` entry point with HF_HUB_OFFLINE: one line, non-zero, no traceback."""
    folder = _published_folder(app, source, tmp_path)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_TOKEN": "hf_not_a_real_token"}
    proc = subprocess.run(
        [sys.executable, "-c", "from certbench.cli.app import main; main()", "publish", str(folder),
         "--repo", "me/x"],
        env=env, capture_output=True, text=True, timeout=timing.seconds(300),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "HF_HUB_OFFLINE is set" in " ".join(proc.stderr.split())
    assert "Traceback" not in proc.stderr + proc.stdout
