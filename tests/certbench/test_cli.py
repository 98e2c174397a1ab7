"""`certbench certify` and `certbench metrics` end to end on a dataset in the torchvision layout."""

from __future__ import annotations

import json

import pytest
import torch
from data_layouts import random_images, random_labels, write_torchvision_cifar
from typer.testing import CliRunner

from certbench.architectures import build_classifier
from certbench.cli import app
from certbench.loading import save_weights
from certbench.metrics import summarize
from certbench.records import read_metadata, read_records

MEAN, STD = [0.49, 0.48, 0.45], [0.2, 0.2, 0.2]

runner = CliRunner()


@pytest.fixture(scope="module")
def submission(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
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
    write_torchvision_cifar(root / "data", "cifar10", random_images(12), random_labels(12, 10))
    return root


def certify_args(root, *extra: str) -> list[str]:
    return [
        "certify", "--weights", str(root / "m.safetensors"), "--manifest", str(root / "m.json"),
        "--dataset", str(root / "data"), "--n0", "10", "--n", "200", "--batch-size", "256",
        "--skip", "3", *extra,
    ]  # fmt: skip


def test_certify_writes_records_and_prints_summary(submission):
    out = submission / "records.parquet"
    result = runner.invoke(
        app, certify_args(submission, "--out", str(out), "--arch", "cifar_resnet20")
    )
    assert result.exit_code == 0, result.output
    records = read_records(out)
    assert [r.index for r in records] == [0, 3, 6, 9]
    assert all(r.n == 200 and r.n0 == 10 and r.sigma == 0.25 for r in records)
    metadata = read_metadata(out)
    assert metadata["protocol"] == {"sigma": 0.25, "n0": 10, "n": 200, "alpha": 0.001, "skip": 3}
    assert len(metadata["weights_sha256"]) == 64
    assert "ACR" in result.output and "abstain rate" in result.output

    shown = runner.invoke(app, ["metrics", str(out), "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["acr"] == pytest.approx(summarize(records).acr)
    looser = runner.invoke(app, ["metrics", str(out), "--json", "--alpha", "0.2"])
    assert looser.exit_code == 0, looser.output
    assert json.loads(looser.output)["acr"] >= summarize(records).acr


def test_contradicting_arch_is_a_clear_error(submission):
    args = certify_args(submission, "--out", str(submission / "x.parquet"), "--arch", "wrn")
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "contradicts the manifest" in result.output
    assert "Traceback" not in result.output
    assert not (submission / "x.parquet").exists()


def test_missing_dataset_and_bad_records_are_clear_errors(submission, tmp_path):
    args = certify_args(submission, "--out", str(tmp_path / "x.parquet"))
    args[args.index("--dataset") + 1] = str(tmp_path / "no-such-folder")
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "error:" in result.output
    missing = runner.invoke(app, ["metrics", str(tmp_path / "none.parquet")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
