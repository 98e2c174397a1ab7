"""`certbench weather-attack` end to end on torchvision-layout data with a WRN-10-1."""

from __future__ import annotations

import dataclasses
import json
from importlib.metadata import entry_points
from typing import Any

import pytest
import torch
import typer
from PIL import Image
from typer.testing import CliRunner

from certbench.cli import weather as weather_commands
from certbench.cli.app import PLUGIN_GROUP
from certbench.cli.weather import parse_severities, parse_weathers
from certbench.data.image_set import Subset
from certbench.data.sources import load_images
from certbench.errors import ThreatModelError
from certbench.nets.architectures import build_classifier
from certbench.nets.loading import load_manifest, load_model, save_weights
from certbench.weather.attack import attack_base, attack_smoothed
from certbench.weather.records import (
    read_weather_metadata,
    read_weather_records,
    summarize_weather,
)
from certbench.weather.search import AttackConfig
from tests.support.data_layouts import random_images, write_torchvision_cifar

MEAN, STD = [0.49, 0.48, 0.45], [0.2, 0.2, 0.2]
ARCH = {"name": "wrn", "kwargs": {"depth": 10, "widen_factor": 1}}  # the smallest registry net
runner = CliRunner()
RUN_SEED = "0x3f9a0c1e5b7d2468ace0fdb97531eca8"
"""A revealed service seed (128 bits): restarts 1+, SmoothAdv and CERTIFY noise."""


def _app() -> typer.Typer:
    """A fresh app with only this plugin, as certbench.cli.app.register_plugins mounts it."""
    cli = typer.Typer()

    @cli.callback()
    def main() -> None:  # a callback keeps sub-commands as named commands
        pass

    weather_commands.register(cli)
    return cli


app = _app()


def test_the_command_is_a_registered_light_plugin() -> None:
    found = {e.name: e.value for e in entry_points(group=PLUGIN_GROUP)}
    assert found["weather"] == "certbench.cli.weather:register"


@pytest.fixture(scope="module")
def submission(tmp_path_factory):
    root = tmp_path_factory.mktemp("weather-cli")
    torch.manual_seed(0)
    model = build_classifier("wrn", num_classes=10, mean=MEAN, std=STD, **ARCH["kwargs"])
    save_weights(model, root / "m.safetensors")
    manifest = {
        "benchmark": "cifar10",
        "architecture": ARCH,
        "num_classes": 10,
        "preprocessing": {"mean": MEAN, "std": STD},
        "smoothing": {"sigma": 0.25},
        "metadata": {"name": "tiny test model"},
    }
    (root / "m.json").write_text(json.dumps(manifest))
    pictures = random_images(6, seed=3)
    model = load_model(root / "m.safetensors", load_manifest(root / "m.json"))
    with torch.no_grad():  # labelled with the model's own predictions: all clean-correct
        labels = model(torch.from_numpy(pictures).float() / 255).argmax(1)
    write_torchvision_cifar(root / "data", "cifar10", pictures, labels)
    return root


def args(root, *extra: str) -> list[str]:
    return [
        "weather-attack", "--weights", str(root / "m.safetensors"),
        "--manifest", str(root / "m.json"), "--dataset", str(root / "data"),
        "--severities", "2", "--steps", "1", "--restarts", "2", "--skip", "2",
        "--weather-seed", "3", "--seed", RUN_SEED, *extra,
    ]  # fmt: skip


def test_base_attack_reproduces_the_library_call_and_writes_outputs(submission, tmp_path):
    out = tmp_path / "base"
    result = runner.invoke(app, args(submission, "--out", str(out), "--examples", "2"))
    assert result.exit_code == 0, result.output
    assert "worst" in result.output and "gap" in result.output and "snow-2" in result.output
    records = read_weather_records(out / "weather_attack.parquet")
    images = load_images(submission / "data", subset=Subset(skip=2))
    model = load_model(submission / "m.safetensors", load_manifest(submission / "m.json"))
    expected = attack_base(
        model, images.images, images.labels, severities=(2,), indices=images.indices,
        config=AttackConfig(steps=1, restarts=2, seed=3), run_seed=int(RUN_SEED, 16),
    )  # fmt: skip
    assert records == expected
    assert [(r.weather, r.index) for r in records] == [
        (w, i) for w in ("rain", "snow") for i in (0, 2, 4)
    ]
    meta = read_weather_metadata(out / "weather_attack.parquet")
    assert meta["protocol"]["steps"] == 1 and meta["protocol"]["seed"] == 3
    assert meta["weather_seed"] == 3 and meta["seed"] == str(int(RUN_SEED, 16))
    assert [s["particles"] for s in meta["perturbation_sets"]] == [35, 25]
    summary = json.loads((out / "summary.json").read_text())
    assert summary == {"kind": "base", **summarize_weather(records).figures}
    for weather in ("rain", "snow"):
        with Image.open(out / f"examples_{weather}_2.png") as png:  # 2 rows of 32 × 32 images
            assert png.size[1] > 2 * 2 * 32 * 3  # drawn at 3× and rendered at 2× for print


def test_smoothed_attack_certifies_with_the_manifest_sigma(submission, tmp_path):
    out = tmp_path / "smoothed"
    extra = ("--smoothed", "--weather", "snow", "--n0", "5", "--n", "50", "--noise-samples", "2")
    result = runner.invoke(app, args(submission, "--out", str(out), *extra))
    assert result.exit_code == 0, result.output
    assert "ACR" in result.output and "@0.25" in result.output
    records = read_weather_records(out / "weather_attack_smoothed.parquet")
    assert len(records) == 3 and all(r.sigma == 0.25 and r.n == 50 for r in records)
    summary = json.loads((out / "summary.json").read_text())
    assert summary == {"kind": "smoothed", **summarize_weather(records).figures}
    assert summary["attacked_acr_snow_2"] == summary["attacked_acr"]  # the only set

    # --seed is the run seed: the library call with run_seed gives the same records
    images = load_images(submission / "data", subset=Subset(skip=2))
    model = load_model(submission / "m.safetensors", load_manifest(submission / "m.json"))
    expected = attack_smoothed(
        model, images.images, images.labels, sigma=0.25, weathers=("snow",), severities=(2,),
        config=AttackConfig(steps=1, restarts=2, seed=3), noise_samples=2, n0=5, n=50,
        indices=images.indices, run_seed=int(RUN_SEED, 16),
    )  # fmt: skip
    assert _timeless(records) == _timeless(expected)


def _timeless(records: list[Any]) -> list[Any]:
    """CERTIFY's records carry wall-clock seconds; every other field must be equal."""
    return [dataclasses.replace(r, seconds=0.0) for r in records]


def test_bad_options_are_clear_errors(submission, tmp_path):
    result = runner.invoke(app, args(submission, "--out", str(tmp_path), "--weather", "fog"))
    assert result.exit_code == 2 and "weather='fog' is unknown" in result.output
    assert "Traceback" not in result.output
    result = runner.invoke(app, [*args(submission, "--out", str(tmp_path)), "--severities", "0..7"])
    assert result.exit_code == 2 and "levels are 1..5" in result.output
    assert parse_severities("1..3,5") == (1, 2, 3, 5) and parse_weathers(" rain,") == ("rain",)
    with pytest.raises(ThreatModelError, match="not a list of levels"):
        parse_severities("a..b")
