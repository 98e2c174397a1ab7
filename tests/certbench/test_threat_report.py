"""Threat report of generated corruption sets, and the threat-report / anchors commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from certbench.cli.app import app, register_plugins
from certbench.cli.pd import ANCHORS_PER_CLASS
from certbench.data.sources import load_images
from certbench.errors import ThreatModelError
from certbench.pd.anchors import DEFAULT_K, AnchorBank, build_anchor_bank
from certbench.pd.report import (
    CARD_START,
    REPORT_FILE,
    threat_points,
    threat_report,
    write_threat_report,
)
from certbench.pd.threat import PDThreat
from tests.support.data_layouts import write_hub_folder, write_torchvision_cifar

CLASSES = tuple(f"class_{i}" for i in range(10))


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Small tensors: one intra-op thread avoids oversubscribing the shared CPU cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Smooth class-coloured images (so classes differ) with pixel noise."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 10
    colours = np.random.default_rng(0).integers(30, 220, (10, 3, 1, 1))
    pixels = colours[labels] + rng.integers(-25, 26, (n, 3, 32, 32))
    return np.clip(pixels, 0, 255).astype(np.uint8), labels


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sources")
    train, train_labels = _images(60, seed=1)
    test, test_labels = _images(40, seed=2)
    write_torchvision_cifar(
        root, "cifar10", train, train_labels, split="train", class_names=CLASSES
    )
    folder = write_torchvision_cifar(
        root, "cifar10", test, test_labels, split="test", class_names=CLASSES
    )
    dataset = root / "corrupted"
    rng = np.random.default_rng(3)
    order = rng.permutation(40)[:30]  # a shuffled subset: matching must go by source_index
    clean = test[order].astype(np.int64)
    other = test[(order + 1) % 40].astype(np.int64)  # the next image has another class
    variants = {
        "noise_s1": clean + rng.normal(0, 4, clean.shape),
        "noise_s3": clean + rng.normal(0, 16, clean.shape),
        "blend_s2": 0.4 * clean + 0.6 * other,
    }
    for config, pixels in variants.items():
        write_hub_folder(
            dataset,
            config,
            np.clip(np.rint(pixels), 0, 255).astype(np.uint8),
            test_labels[order],
            class_names=CLASSES,
            extra={
                "corruption": np.array([config.split("_")[0]] * 30),
                "severity": np.full(30, int(config[-1]), dtype=np.int64),
            },
            source_index=order,
        )
    (dataset / "README.md").write_text(
        (dataset / "README.md").read_text() + "\n# Card\n\nBody.\n", encoding="utf-8"
    )
    bank = build_anchor_bank(
        torch.from_numpy(train),
        torch.from_numpy(train_labels),
        class_names=CLASSES,
        dataset="tiny-cifar10",
        k=3,
        seed=0,
    )
    bank_path = bank.save(root / "anchors.safetensors")
    return {"root": root, "clean": folder, "dataset": dataset, "bank": bank_path}


def test_report_statistics_match_direct_computation(sources):
    bank = AnchorBank.load(sources["bank"])
    report = threat_report(
        sources["dataset"], clean_source=sources["clean"], anchors=bank, pairs=50, batch_size=7
    )
    by_name = {s.name: s for s in report.sets}
    assert sorted(by_name) == ["blend_s2", "noise_s1", "noise_s3"]
    clean = load_images(sources["clean"], split="test")
    corrupted = load_images(sources["dataset"], config="noise_s3")
    x = clean.as_float()[corrupted.indices]
    delta = corrupted.as_float() - x
    expected_pd = PDThreat(bank)(x, delta, clean.labels[corrupted.indices])
    stats = by_name["noise_s3"]
    assert stats.count == 30 and stats.severity == 3 and stats.corruption == "noise"
    assert stats.d_pd.mean == pytest.approx(float(expected_pd.mean()), rel=1e-5)
    assert stats.d_pd.quantiles["q50"] == pytest.approx(
        float(np.quantile(expected_pd.double().numpy(), 0.5)), rel=1e-5
    )
    assert stats.d_inf.mean == pytest.approx(float(delta.flatten(1).abs().amax(1).mean()))
    assert stats.d_2.mean == pytest.approx(float(delta.flatten(1).norm(dim=1).mean()), rel=1e-5)
    # Stronger noise is a larger threat; moving towards another class's image larger still.
    assert by_name["noise_s1"].d_pd.mean < stats.d_pd.mean < by_name["blend_s2"].d_pd.mean
    assert report.unsafe_pairs.d_pd.mean > by_name["noise_s3"].d_pd.mean
    assert report.unsafe_pairs.count == 50


def test_outputs_land_next_to_the_card_and_rerun_replaces_the_section(sources):
    bank = AnchorBank.load(sources["bank"])
    report = threat_report(
        sources["dataset"],
        clean_source=sources["clean"],
        anchors=bank,
        configs=["noise_s1"],
        limit=10,
        pairs=20,
    )
    assert report.sets[0].count == 10
    from certbench.figures import render, threat_figure

    png = render(threat_figure(*threat_points(report)), "png")  # the CLI's figure, from a spec
    for _ in range(2):
        written = write_threat_report(report, sources["dataset"], figure_png=png)
    payload = json.loads((sources["dataset"] / REPORT_FILE).read_text())
    assert payload["sets"][0]["name"] == "noise_s1"
    assert payload["anchors"]["k"] == "3" and payload["anchors"]["dataset"] == "tiny-cifar10"
    figure = sources["dataset"] / "images" / "pd_threat.png"
    assert figure in written and figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    card = (sources["dataset"] / "README.md").read_text()
    assert card.count(CARD_START) == 1 and "# Card" in card and "| noise_s1 | noise | 1 |" in card
    # the published card names the PD paper, not the project's seed file
    assert "Muthukumar, Pal, Sulam & Vidal 2025" in card and "seed " + "004" not in card


def test_unknown_source_index_is_refused(sources, tmp_path):
    bank = AnchorBank.load(sources["bank"])
    images, labels = _images(4, seed=9)
    write_hub_folder(
        tmp_path, "noise_s1", images, labels, class_names=CLASSES, source_index=[0, 1, 2, 999]
    )
    with pytest.raises(ThreatModelError, match="source_index"):
        threat_report(tmp_path, clean_source=sources["clean"], anchors=bank, pairs=5)


def test_commands_build_anchors_and_write_the_report(sources, tmp_path):
    register_plugins(app)
    runner = CliRunner()
    bank_path = tmp_path / "bank.safetensors"
    built = runner.invoke(
        app, ["anchors", "build", str(sources["root"]), "--out", str(bank_path), "--k", "2"]
    )
    assert built.exit_code == 0, built.output
    bank = AnchorBank.load(bank_path)
    assert bank.k == 2 and bank.images.shape[0] == 20 and bank.split == "train"
    info = runner.invoke(app, ["anchors", "info", str(bank_path)])
    assert info.exit_code == 0 and "seed: 0" in info.output
    k_min = runner.invoke(
        app, ["anchors", "k-min", str(sources["root"]), "--k-max", "6", "--pairs", "100"]
    )
    assert k_min.exit_code == 0 and "k_min =" in k_min.output, k_min.output
    report = runner.invoke(
        app,
        [
            "threat-report",
            str(sources["dataset"]),
            "--clean",
            str(sources["clean"]),
            "--anchors",
            str(bank_path),
            "--pairs",
            "30",
            "--no-card",
        ],
    )
    assert report.exit_code == 0, report.output
    assert "blend_s2: d_PD" in report.output
    missing = runner.invoke(
        app,
        [
            "threat-report",
            str(sources["dataset"]),
            "--clean",
            str(sources["clean"]),
            "--anchors",
            str(tmp_path / "none.safetensors"),
        ],
    )
    assert missing.exit_code == 2 and "anchors build" in missing.output


def test_commands_default_k_is_the_papers():
    assert ANCHORS_PER_CLASS == DEFAULT_K == 50


def test_registering_the_pd_commands_imports_no_torch():
    """``certbench --help`` must not pay for torch because the PD commands are installed."""
    code = (
        "import sys, typer; from certbench.cli.pd import register; "
        "register(typer.Typer()); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_report_and_card_name_no_local_path(sources):
    """A bank built from a local folder records that folder; the published card must not."""
    from certbench.data.provenance import find_local_paths

    local = AnchorBank.load(sources["bank"])
    bank = build_anchor_bank(
        local.images, local.labels, class_names=CLASSES, dataset=str(sources["root"]), k=3
    )
    report = threat_report(
        sources["dataset"], clean_source=sources["clean"], anchors=bank, configs=["noise_s1"],
        limit=5, pairs=10,
    )  # fmt: skip
    write_threat_report(report, sources["dataset"])
    for name in ("README.md", REPORT_FILE):
        text = (sources["dataset"] / name).read_text()
        assert str(sources["root"]) not in text and find_local_paths(text) == [], name
    assert "from a local folder" in (sources["dataset"] / "README.md").read_text()
