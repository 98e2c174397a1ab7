"""`certbench certify`, `metrics` and `robust-accuracy` end to end on torchvision-layout data."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from certbench.cli.app import app
from certbench.data.image_set import Subset
from certbench.data.sources import load_images
from certbench.nets.architectures import build_classifier
from certbench.nets.loading import load_manifest, load_model, save_weights
from certbench.pd.anchors import AnchorBank, bank_from_image_set
from certbench.pd.evaluation import RobustnessReport, robust_accuracy
from certbench.smoothing.metrics import summarize
from certbench.smoothing.records import read_metadata, read_records
from certbench.smoothing.streams import derive_seed
from tests.support.data_layouts import random_images, random_labels, write_torchvision_cifar

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
    assert json.loads(shown.stdout)["acr"] == pytest.approx(summarize(records).acr)
    looser = runner.invoke(app, ["metrics", str(out), "--json", "--alpha", "0.2"])
    assert looser.exit_code == 0, looser.output
    assert json.loads(looser.stdout)["acr"] >= summarize(records).acr


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


@pytest.fixture(scope="module")
def anchors(submission):
    """A k=2 bank from a torchvision-layout training split (the anchors' usual source)."""
    train_root = submission / "train"
    labels = torch.arange(30) % 10
    write_torchvision_cifar(train_root, "cifar10", random_images(30), labels, split="train")
    train = load_images(train_root, split="train")
    bank = bank_from_image_set(train, dataset="tiny", k=2)
    # test images labelled with the model's own predictions, so every one is attacked
    model = load_model(submission / "m.safetensors", load_manifest(submission / "m.json"))
    pictures = random_images(12, seed=4)
    with torch.no_grad():
        labels = model(torch.from_numpy(pictures).float() / 255).argmax(1)
    write_torchvision_cifar(submission / "robust-data", "cifar10", pictures, labels)
    return bank.save(submission / "bank.safetensors")


def test_robust_accuracy_reproduces_the_library_call(submission, anchors):
    out = submission / "robust.parquet"
    args = [
        "robust-accuracy", "--weights", str(submission / "m.safetensors"),
        "--manifest", str(submission / "m.json"), "--dataset", str(submission / "robust-data"),
        "--anchors", str(anchors), "--out", str(out), "--eps", "16", "--n-iter", "3",
        "--n-target-classes", "1", "--skip", "4", "--seed", "5", "--projection", "lazy",
    ]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "pd_robust_accuracy_16" in result.output
    images = load_images(submission / "robust-data", subset=Subset(skip=4))
    model = load_model(submission / "m.safetensors", load_manifest(submission / "m.json"))
    expected = robust_accuracy(
        model, images.images, images.labels, anchors=AnchorBank.load(anchors),
        eps_list=(16 / 255,), n_iter=3, n_target_classes=1, seed=derive_seed(5, "pd"),
        indices=images.indices, pd_projection="lazy",
    )  # fmt: skip
    assert RobustnessReport.read(out) == expected
    assert [r.index for r in expected.records] == [0, 4, 8]
    assert expected.clean_accuracy() == 1.0 and expected.linf_accuracy(16 / 255) < 1.0


def test_robust_accuracy_refuses_pdw_without_superclasses(submission, anchors, tmp_path):
    args = [
        "robust-accuracy", "--weights", str(submission / "m.safetensors"),
        "--manifest", str(submission / "m.json"), "--dataset", str(submission / "data"),
        "--anchors", str(anchors), "--out", str(tmp_path / "r.parquet"), "--weighting", "pdw",
    ]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "PD-W needs superclass labels" in result.output
    assert not (tmp_path / "r.parquet").exists()


def records_without_time(path) -> list[tuple]:
    """Every column of a records file but the wall-clock seconds."""
    return [
        tuple(getattr(r, name) for name in r.__slots__ if name != "seconds")
        for r in read_records(path)
    ]


@pytest.fixture(scope="module")
def noise_sensitive_weights(submission):
    """An untrained ResNet-20 votes one class whatever the noise; centring and scaling its last
    layer on noisy features makes every vote depend on the noise, so counts show the stream."""
    torch.manual_seed(1)
    model = build_classifier("cifar_resnet20", num_classes=10, mean=MEAN, std=STD).eval()
    net = model[1]
    fc, net.fc = net.fc, nn.Identity()
    noisy = torch.from_numpy(random_images(1)).float() / 255 + 0.25 * torch.randn(64, 3, 32, 32)
    with torch.no_grad():
        features = model(noisy)
        fc.weight.mul_(1000)
        fc.bias.copy_(-fc.weight @ features.mean(0))
    net.fc = fc
    save_weights(model, submission / "noise_sensitive.safetensors")
    return submission / "noise_sensitive.safetensors"


def test_128_bit_seed_reproduces_records_and_its_high_bits_matter(
    submission, noise_sensitive_weights, tmp_path
):
    """A revealed service seed (128 bits, hex or decimal) reproduces the records bit for bit
    (all columns but the wall-clock seconds); seeds sharing their low 64 bits still differ."""
    low = 0x0123_4567_89AB_CDEF
    seeds = {
        "hex": hex((1 << 127) | low),
        "dec": str((1 << 127) | low),
        "high": hex((1 << 126) | low),
    }
    for name, seed in seeds.items():
        out = tmp_path / f"{name}.parquet"
        args = certify_args(submission, "--out", str(out), "--seed", seed, "--limit", "2")
        args[args.index("--weights") + 1] = str(noise_sensitive_weights)
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    first = records_without_time(tmp_path / "hex.parquet")
    assert records_without_time(tmp_path / "dec.parquet") == first
    assert records_without_time(tmp_path / "high.parquet") != first
    metadata = read_metadata(tmp_path / "hex.parquet")
    assert metadata["seed"] == str((1 << 127) | low) and metadata["device_type"] == "cpu"


def test_malformed_seed_is_a_clear_error(submission, tmp_path):
    args = certify_args(submission, "--out", str(tmp_path / "x.parquet"), "--seed", "deadbeef")
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "0x-prefixed hex" in result.output
    assert not (tmp_path / "x.parquet").exists()
