"""`certbench fourier-heatmap` end to end on torchvision-layout data with a tiny ResNet-20."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
import typer
from typer.testing import CliRunner

from certbench.cli.fourier import register
from certbench.data.image_set import Subset
from certbench.data.sources import load_images
from certbench.fourier.records import read_sensitivity_records
from certbench.fourier.sensitivity import get_protocol, sensitivity_records
from certbench.nets.architectures import build_classifier
from certbench.nets.loading import load_manifest, load_model, save_weights
from certbench.smoothing.records import read_metadata
from tests.support.data_layouts import random_images, random_labels, write_torchvision_cifar

MEAN, STD = [0.49, 0.48, 0.45], [0.2, 0.2, 0.2]
runner = CliRunner()
app = typer.Typer()


@app.callback()
def main() -> None:  # a callback keeps the sub-command a named command
    """A fresh app with only this plugin, as certbench.cli.app.register_plugins would mount it."""


register(app)


@pytest.fixture(scope="module")
def submission(tmp_path_factory):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("fourier")
    torch.manual_seed(0)
    model = build_classifier("cifar_resnet20", num_classes=10, mean=MEAN, std=STD)
    save_weights(model, root / "m.safetensors")
    manifest = {
        "benchmark": "cifar10",
        "architecture": {"name": "cifar_resnet20", "kwargs": {}},
        "num_classes": 10,
        "preprocessing": {"mean": MEAN, "std": STD},
        "smoothing": {"sigma": 0.25},
        "metadata": {"name": "tiny test model"},
    }
    (root / "m.json").write_text(json.dumps(manifest))
    write_torchvision_cifar(root / "data", "cifar10", random_images(6), random_labels(6, 10))
    yield root
    torch.set_num_threads(before)


def args(root, *extra: str) -> list[str]:
    return [
        "fourier-heatmap", "--weights", str(root / "m.safetensors"),
        "--manifest", str(root / "m.json"), "--dataset", str(root / "data"),
        "--protocol", "quick", "--n0", "4", "--n", "12", "--images", "2", "--skip", "3",
        "--stride", "8", "--batch-size", "32", *extra,
    ]  # fmt: skip


def test_fourier_heatmap_writes_records_figures_and_summary(submission):
    out = submission / "out"
    result = runner.invoke(app, args(submission, "--out", str(out)))
    assert result.exit_code == 0, result.output
    assert "cost per point: 2 × (4 + 12) = 32 smoothed forward passes" in result.output
    assert "total: 340 forward passes" in result.output  # 10 points × (32 + 2)
    assert "quick+custom" in result.output
    for name in ("acr_heatmap", "base_accuracy_heatmap"):
        assert (out / f"{name}.png").stat().st_size > 0
        assert "cycles/image" in (out / f"{name}.svg").read_text()
    records = read_sensitivity_records(out / "records.parquet")
    assert len(records) == 20 and {r.index for r in records} == {0, 3}

    # the CLI is the library call: same records for the same protocol, seed and test set
    spec = load_manifest(submission / "m.json")
    model = load_model(submission / "m.safetensors", spec)
    protocol = get_protocol("quick", n0=4, n=12, images=2, skip=3, stride=8)
    test = load_images(str(submission / "data"), subset=Subset(3, 2))
    direct = sensitivity_records(
        model, test.as_float(), test.labels, test.indices, protocol.points(), protocol,
        sigma=0.25, test_set="default/test", batch_size=5,
    )  # fmt: skip
    assert [replace(r, certified=replace(r.certified, seconds=0)) for r in records] == [
        replace(r, certified=replace(r.certified, seconds=0)) for r in direct
    ]

    summary = json.loads((out / "summary.json").read_text())
    assert summary["protocol"]["name"] == "quick+custom" and summary["sigma"] == 0.25
    assert summary["heatmap"]["frequencies"] == [-16, -8, 0, 8]
    assert summary["summary"]["cells"] == 16
    assert set(summary["summary"]["acr"]["bands"]) == {"low", "mid", "high", "all"}
    assert read_metadata(out / "records.parquet")["protocol"]["n"] == 12


def test_base_only_skips_smoothing(submission):
    out = submission / "base"
    result = runner.invoke(app, args(submission, "--out", str(out), "--base-only"))
    assert result.exit_code == 0, result.output
    assert "total: 20 forward passes" in result.output
    assert not (out / "acr_heatmap.svg").exists() and (out / "base_accuracy_heatmap.svg").exists()
    assert all(r.certified is None for r in read_sensitivity_records(out / "records.parquet"))
    assert json.loads((out / "summary.json").read_text())["summary"]["acr"] is None


def test_unknown_protocol_is_a_clear_error(submission):
    base = args(submission)[:7]  # the command, weights, manifest and dataset only
    result = runner.invoke(app, [*base, "--protocol", "fast", "--out", str(submission / "x")])
    assert result.exit_code == 2
    assert "protocol 'fast' is unknown" in result.output


def test_registering_the_command_imports_no_torch():
    """``certbench --help`` must not pay for torch because this command is installed."""
    code = (
        "import sys, typer; from certbench.cli.fourier import register; "
        "register(typer.Typer()); print('torch' in sys.modules, 'matplotlib' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_signs_follow_the_papers_release_by_default_and_the_record_says_which(submission):
    """Issue 26 §2: one sign per image (Sun et al.'s certify_fourier.py) unless
    ``--signs per-channel`` (Yin et al.); records, summary and output name the convention."""
    seen = {}
    for extra in ((), ("--signs", "per-channel")):
        out = submission / f"signs{len(extra)}"
        result = runner.invoke(app, args(submission, "--base-only", "--out", str(out), *extra))
        assert result.exit_code == 0, result.output
        records = read_sensitivity_records(out / "records.parquet")
        summary = json.loads((out / "summary.json").read_text())
        name = summary["signs"]
        assert f"signs: {name}" in result.output
        assert summary["protocol"]["channel_signs"] == {"per-image": "shared"}.get(
            name, "independent"
        )
        seen[name] = {len(set(r.signs)) for r in records}
    assert seen["per-image"] == {1}  # one sign for all three channels of an image
    assert 2 in seen["per-channel"]  # 20 records × 3 independent signs: some image mixes them
    bad = runner.invoke(app, args(submission, "--out", str(submission / "x"), "--signs", "rgb"))
    assert bad.exit_code == 2 and "per-image" in bad.output
