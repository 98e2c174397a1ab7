"""`certbench fourier-lens` and `certbench effective-robustness` end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points

import pytest
import torch
import typer
from data_layouts import random_images, random_labels, write_torchvision_cifar
from scipy.stats import norm
from typer.testing import CliRunner

from certbench.architectures import build_classifier
from certbench.fourier_lens import read_lens_metadata, read_lens_records
from certbench.lens_commands import register
from certbench.loading import save_weights

MEAN, STD = [0.49, 0.48, 0.45], [0.2, 0.2, 0.2]

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
    assert "certbench.lens_commands:register" in {
        e.value for e in entry_points(group="certbench.commands")
    }
    code = "import sys, certbench.lens_commands; print('torch' in sys.modules)"
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
    assert "paths=7" in result.output


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
