"""`certbench fourier-lens` and `certbench effective-robustness` end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import pytest
import torch
import typer
from scipy.stats import norm
from typer.testing import CliRunner

from certbench.cli.lens import register
from certbench.lens.lens import read_lens_metadata, read_lens_records
from certbench.nets.architectures import build_classifier
from certbench.nets.loading import save_weights
from tests.support.data_layouts import random_images, random_labels, write_torchvision_cifar

MEAN, STD = [0.49, 0.48, 0.45], [0.2, 0.2, 0.2]
METRIC_NAMES = (
    "hff_amplitude", "cd_amplitude", "hff_phase", "cd_phase", "hff_pixel_within",
    "hff_pixel_between", "jacobian_norm",
)  # fmt: skip

runner = CliRunner()


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    cli = typer.Typer()
    register(cli)
    return cli


@pytest.fixture(scope="module")
def submission(tmp_path_factory):
    root = tmp_path_factory.mktemp("lens-cli")
    torch.manual_seed(0)
    save_weights(
        build_classifier("cifar_resnet20", num_classes=10, mean=MEAN, std=STD),
        root / "m.safetensors",
    )
    manifest = {
        "benchmark": "cifar10",
        "architecture": {"name": "cifar_resnet20", "kwargs": {}},
        "num_classes": 10,
        "preprocessing": {"mean": MEAN, "std": STD},
        "smoothing": {"sigma": 0.25},
        "metadata": {"name": "tiny lens model"},
    }
    (root / "m.json").write_text(json.dumps(manifest))
    write_torchvision_cifar(root / "data", "cifar10", random_images(12), random_labels(12, 10))
    return root


def test_commands_are_registered_and_light():
    assert "certbench.cli.lens:register" in {
        e.value for e in entry_points(group="certbench.commands")
    }
    code = "import sys, certbench.cli.lens; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_fourier_lens_writes_records_and_summary(app, submission):
    out = submission / "lens"
    args = [
        "fourier-lens", "--weights", str(submission / "m.safetensors"),
        "--manifest", str(submission / "m.json"), "--dataset", str(submission / "data"),
        "--paths", "1", "--kind", "amplitude", "--kind", "jacobian", "--jacobian-images", "3",
        "--out", str(out),
    ]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    records = read_lens_records(out / "records.parquet")
    assert [r.kind for r in records] == ["amplitude"] + ["jacobian"] * 3
    metadata = read_lens_metadata(out / "records.parquet")
    assert metadata["protocol"]["paths"] == 1 and metadata["sigma"] == 0.25
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"] == {"amplitude": 1, "jacobian": 3}
    one_path = summary["metrics"]["hff_amplitude"]
    assert one_path["count"] == 1 and one_path["low"] is None  # no interval from one path
    assert summary["metrics"]["jacobian_norm"]["low"] > 0
    assert "hff_amplitude" in result.output and "jacobian_norm" in result.output


def test_fourier_lens_reports_bad_protocol_as_a_user_error(app, submission):
    args = [
        "fourier-lens", "--weights", str(submission / "m.safetensors"),
        "--manifest", str(submission / "m.json"), "--dataset", str(submission / "data"),
        "--paths", "7", "--out", str(submission / "bad"),
    ]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    shown = " ".join(result.output.split())
    # 7 paths are fitted to the 12 images; a class with one image cannot give a pixel pair.
    assert "paths 7 → 6" in shown and "pixel_pairs=200 within-class pairs" in shown
    assert "class 0, which has 1" in shown


def write_entries(root, sigma: float, count: int, shift_middle: float = 0.0) -> list[str]:
    paths = []
    for i in range(count):
        acc = 0.55 + 0.4 * i / (count - 1)
        shift = shift_middle if i == count // 2 else 0.0
        ood = norm.cdf(-0.4 + 0.8 * norm.ppf(acc) + shift)
        entry = {
            "name": f"s{sigma}-m{i}",
            "sigma": sigma,
            "id": {"correct": round(acc * 10_000), "total": 10_000},
            "ood": {"fog": {"correct": round(ood * 10_000), "total": 10_000}},
            "metrics": {"hff_amplitude": 0.3 - 0.01 * i},
        }
        path = root / f"{sigma}-{i}.json"
        path.write_text(json.dumps(entry))
        paths.append(str(path))
    return paths


def test_effective_robustness_fits_each_sigma_separately(app, tmp_path):
    files = write_entries(tmp_path, 0.25, 8, shift_middle=0.4) + write_entries(tmp_path, 0.5, 4)
    result = runner.invoke(app, ["effective-robustness", *files, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert [g["sigma"] for g in report] == [0.25, 0.5]
    assert report[1]["trends"][0]["fit"]["slope"] == pytest.approx(0.8, abs=0.02)
    outlier = report[0]["trends"][0]["entries"][4]
    assert outlier["name"] == "s0.25-m4" and outlier["low"] > 0
    metrics = {p["metric"] for p in report[0]["predictors"]}
    assert metrics == {"id_accuracy", "hff_amplitude"}
    table = runner.invoke(app, ["effective-robustness", *files])
    assert table.exit_code == 0 and "σ = 0.25" in table.output and "fog" in table.output


def test_effective_robustness_bad_input_is_a_user_error(app, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x", "sigma": 0.25, "id": {"correct": 1}}))
    result = runner.invoke(app, ["effective-robustness", str(bad)])
    assert result.exit_code == 2 and "bad.json" in result.output


def same_function_entries(root, scales: list[float]) -> list[tuple[str, str]]:
    """Two entries of one function: std ``scales`` with first layer W, std 1 with W·diag(1/s).

    Powers of two make the rescaling exact in float32, so both networks compute the same logits
    for every pixel input; only what each manifest declares differs."""
    torch.manual_seed(4)
    declared = build_classifier("lenet5", num_classes=10, mean=MEAN, std=scales)
    rescaled = build_classifier("lenet5", num_classes=10, mean=MEAN, std=[1.0, 1.0, 1.0])
    rescaled.load_state_dict(declared.state_dict())
    with torch.no_grad():
        rescaled[1].conv1.weight.div_(torch.tensor(scales).view(1, 3, 1, 1))
    files = []
    for name, model, std in (("declared", declared, scales), ("rescaled", rescaled, [1.0] * 3)):
        save_weights(model, root / f"{name}.safetensors")
        manifest = {
            "benchmark": "cifar10",
            "architecture": {"name": "lenet5", "kwargs": {}},
            "num_classes": 10,
            "preprocessing": {"mean": MEAN, "std": std},
            "smoothing": {"sigma": 0.25},
            "metadata": {"name": name},
        }
        (root / f"{name}.json").write_text(json.dumps(manifest))
        files.append((str(root / f"{name}.safetensors"), str(root / f"{name}.json")))
    return files


def test_lens_figures_do_not_depend_on_the_declared_normalisation(app, tmp_path):
    """Issue 26 §1: every lens figure is taken w.r.t. pixels in [0, 1], so an entry cannot move
    its Jacobian norm (∝ std in the normalised space) or its pixel paths (1/std images longer)
    by declaring another std and rescaling its first layer."""
    labels = np.arange(30) % 10
    write_torchvision_cifar(tmp_path / "data", "cifar10", random_images(30, seed=3), labels)
    summaries, records = [], []
    for weights, manifest in same_function_entries(tmp_path, [0.25, 0.5, 0.125]):
        out = tmp_path / Path(manifest).stem
        args = [
            "fourier-lens", "--weights", weights, "--manifest", manifest,
            "--dataset", str(tmp_path / "data"), "--paths", "2", "--pixel-pairs", "1",
            "--jacobian-images", "4", "--out", str(out),
        ]  # fmt: skip
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "per unit pixel, [0,1] scale" in result.output
        summaries.append(json.loads((out / "summary.json").read_text()))
        records.append(read_lens_records(out / "records.parquet"))
    declared, rescaled = summaries
    assert declared["counts"] == rescaled["counts"]
    assert set(declared["metrics"]) == set(METRIC_NAMES)
    for group in ("metrics", "nyquist"):
        for name, value in declared[group].items():
            assert value["mean"] == pytest.approx(rescaled[group][name]["mean"], rel=1e-6), name
    assert [r.length for r in records[0]] == [r.length for r in records[1]]
    assert declared["metrics"]["jacobian_norm"]["mean"] > 0
