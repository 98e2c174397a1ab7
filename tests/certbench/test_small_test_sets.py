"""The quick looks of the README run on the demo data's 364 test images (issue 25 §3): the quick
Fourier heatmap measured 4 images without saying why, and ``fourier-lens --paths 200`` failed.
Both now fit the data, print what they changed, and record it in the protocol they write."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import typer
from typer.testing import CliRunner

from certbench.cli.fourier import register as register_fourier
from certbench.cli.lens import register as register_lens
from certbench.data import write_demo_dataset
from certbench.lens import LensProtocol, fit_to_test_set, lens_plan
from certbench.nets.architectures import build_classifier
from certbench.nets.loading import save_weights

runner = CliRunner()


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """The demo data and an untrained LeNet-5 for it (what is measured does not matter here)."""
    root = tmp_path_factory.mktemp("small")
    write_demo_dataset(root / "digits")
    torch.manual_seed(0)
    mean, std = [0.3, 0.3, 0.3], [1.0, 1.0, 1.0]
    save_weights(build_classifier("lenet5", num_classes=10, mean=mean, std=std), root / "m.st")
    manifest = {
        "benchmark": "demo-digits",
        "architecture": {"name": "lenet5", "kwargs": {}},
        "num_classes": 10,
        "preprocessing": {"mean": mean, "std": std},
        "smoothing": {"sigma": 0.5},
        "metadata": {"name": "untrained LeNet-5"},
    }
    (root / "m.json").write_text(json.dumps(manifest))
    return root


def _app(register) -> typer.Typer:
    app = typer.Typer()
    app.callback()(lambda: None)
    register(app)
    return app


def _model(root: Path) -> list[str]:
    return ["--weights", str(root / "m.st"), "--manifest", str(root / "m.json"),
            "--dataset", str(root / "digits")]  # fmt: skip


def test_quick_heatmap_takes_a_hundred_images_spread_over_a_small_split(demo: Path) -> None:
    out = demo / "fourier"
    argv = ["fourier-heatmap", *_model(demo), "--protocol", "quick", "--base-only",
            "--stride", "16", "--out", str(out)]  # fmt: skip
    result = runner.invoke(_app(register_fourier), argv)
    assert result.exit_code == 0, result.output
    assert "364 images, so one in 100 would give only 4" in " ".join(result.output.split())
    protocol = json.loads((out / "summary.json").read_text())["protocol"]
    assert (protocol["skip"], protocol["images"], protocol["name"]) == (3, 100, "quick+custom")


def test_an_explicit_skip_is_kept(demo: Path) -> None:
    out = demo / "fourier-skip"
    argv = ["fourier-heatmap", *_model(demo), "--protocol", "quick", "--base-only",
            "--stride", "16", "--skip", "100", "--out", str(out)]  # fmt: skip
    result = runner.invoke(_app(register_fourier), argv)
    assert result.exit_code == 0, result.output
    shown = " ".join(result.output.split())
    assert "only 4 images available" in shown and "--skip 1 --images N" in shown
    assert json.loads((out / "summary.json").read_text())["protocol"]["skip"] == 100


def test_lens_quick_look_fits_its_paths_to_the_demo(demo: Path) -> None:
    out = demo / "lens"
    argv = ["fourier-lens", *_model(demo), "--paths", "200", "--steps", "3", "--kind",
            "amplitude", "--kind", "phase", "--batch-size", "256", "--out", str(out)]  # fmt: skip
    result = runner.invoke(_app(register_lens), argv)
    assert result.exit_code == 0, result.output
    assert "paths 200 → 182" in " ".join(result.output.split())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["protocol"]["paths"] == 182


def test_fitting_caps_each_count_to_what_the_labels_allow() -> None:
    per_class = [36, 37, 36, 37, 37, 37, 37, 36, 35, 36]  # the demo's 364 test images
    labels = np.repeat(np.arange(10), per_class)
    fitted, notes = fit_to_test_set(LensProtocol(paths=200), labels)
    assert (fitted.paths, fitted.pixel_pairs, fitted.jacobian_images) == (182, 17, 364)
    assert len(notes) == 3 and all("→" in note for note in notes)
    plan = lens_plan(labels, fitted, seed=0)  # the fitted protocol is one the plan accepts
    assert len(plan.pairs["amplitude"]) == 182
    between = LensProtocol(kinds=("pixel_between",), pixel_pairs=200)
    assert fit_to_test_set(between, labels)[0].pixel_pairs == 35
    roomy = LensProtocol(paths=100, pixel_pairs=10, jacobian_images=300)
    assert fit_to_test_set(roomy, labels) == (roomy, [])
