"""A manifest's ``denoiser`` block: refused at validation when hostile, checked against the
header on the ``meta`` device, counted in the entry's cost, and composed by the one loader every
stage, the CLI and the zoo use (``certbench.nets.load_model``)."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, cast

import pytest
import torch

from certbench.denoising import (
    DENOISER_PRESETS,
    DenoisedClassifier,
    DnCNNConfig,
    build_denoiser,
    check_denoiser,
    composition_label,
    denoiser_shapes,
)
from certbench.errors import ManifestError, StateDictMismatchError
from certbench.nets import build_classifier, check_fit, load_manifest, max_tensors, save_weights
from certbench.nets.cost import manifest_cost, network_cost, parameters_of
from certbench.nets.header import read_header

SIGMA = 0.5
PLAIN: dict[str, Any] = {
    "benchmark": "demo-digits",
    "architecture": {"name": "lenet5"},
    "num_classes": 10,
    "preprocessing": {"mean": [0.45] * 3, "std": [0.25] * 3},
    "smoothing": {"sigma": SIGMA},
    "metadata": {"name": "denoised lenet5"},
}
UNET = {
    "sample_size": 32,
    "block_out_channels": [16, 32],
    "down_block_types": ["DownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "UpBlock2D"],
    "layers_per_block": 1,
    "norm_num_groups": 8,
}
DNCNN = {"kind": "dncnn", "depth": 4, "features": 8}


def denoised(block: object, **changes: Any) -> dict[str, Any]:
    return {**PLAIN, **changes, "denoiser": block}


def test_a_plain_manifest_reads_and_writes_as_before():
    """No ``denoiser`` key appears in a plain manifest's JSON, so its canonical form (dedup
    hashes, the workers' model cache key) is what it was."""
    manifest = load_manifest(PLAIN)
    assert manifest.denoiser is None
    assert "denoiser" not in manifest.model_dump(mode="json")
    assert '"denoiser"' not in manifest.canonical_json()
    assert '"denoiser"' not in manifest.model_dump_json()


def test_a_denoised_manifest_round_trips():
    manifest = load_manifest(denoised({"kind": "diffusion", "unet": UNET}))
    assert manifest.denoiser is not None and manifest.denoiser.kind == "diffusion"
    again = load_manifest(manifest.canonical_json())
    assert again == manifest and again.canonical_json() == manifest.canonical_json()
    assert composition_label(manifest.denoiser, manifest.architecture.name) == "diffusion · lenet5"
    assert composition_label(None, "lenet5") == "lenet5"


@pytest.mark.parametrize(
    ("block", "named"),
    [
        (
            {"kind": "diffusion", "unet": {**UNET, "pretrained": True}},
            "'pretrained' is not allowed",
        ),
        ({"kind": "diffusion", "unet": {**UNET, "checkpoint_path": "x.pt"}}, "'checkpoint_path'"),
        ({"kind": "diffusion", "unet": UNET, "url": "https://example.org/u"}, "'url' is not"),
        ({**DNCNN, "file": "dncnn.pth"}, "'file' is not allowed"),
        ({**DNCNN, "pretrained_cfg_overlay": {"file": "x"}}, "'pretrained_cfg_overlay'"),
        ({"kind": "diffusion", "unet": {**UNET, "block_out_channels": [10**12, 32]}}, "1024"),
        ({"kind": "memnet"}, "'diffusion', 'dncnn'"),
        ("dncnn", "a denoiser is a JSON object"),
        ({"kind": "diffusion", "unet": {**UNET, "sample_size": 64}}, "sample_size is 64"),
        ({"kind": "diffusion", "unet": {**UNET, "in_channels": 1, "out_channels": 1}}, "channels"),
        ({"kind": "diffusion", "unet": UNET, "num_train_timesteps": 20}, "β ≥ 1"),
    ],
)
def test_a_hostile_or_unfit_denoiser_is_refused_without_building_anything(
    block, named, monkeypatch
):
    """Refused while the manifest is validated (the API's 422 bad_manifest), naming the key;
    no network is built (no ``diffusers`` module constructed), nothing read or fetched."""

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("a refused manifest must not build its denoiser")

    monkeypatch.setattr("certbench.denoising.diffusion.build_unet", no_build)
    monkeypatch.setattr("certbench.denoising.composed.build_unet", no_build)
    with pytest.raises(ManifestError, match=named):
        load_manifest(denoised(block))


def test_sigma_beyond_the_schedule_and_overlong_labels_are_refused():
    with pytest.raises(ManifestError, match="beyond this schedule"):
        load_manifest(denoised({"kind": "diffusion", "unet": UNET}, smoothing={"sigma": 200.0}))
    # the leaderboard's architecture column holds 64 characters, "dncnn · " included
    with pytest.raises(ManifestError, match="at most 56 characters"):
        check_denoiser(DnCNNConfig(), input_size=(3, 32, 32), sigma=SIGMA, architecture="x" * 57)
    check_denoiser(DnCNNConfig(), input_size=(3, 32, 32), sigma=SIGMA, architecture="x" * 56)


def composed_file(tmp_path, manifest_block: dict[str, Any]) -> tuple[Any, Any]:
    manifest = load_manifest(denoised(manifest_block))
    assert isinstance(manifest.denoiser, DnCNNConfig)
    torch.manual_seed(0)
    denoiser = build_denoiser(manifest.denoiser, sigma=SIGMA, input_size=(3, 32, 32))
    classifier = build_classifier("lenet5", num_classes=10, mean=[0.45] * 3, std=[0.25] * 3)
    path = tmp_path / "model.safetensors"
    save_weights(DenoisedClassifier(denoiser, classifier), path)
    return manifest, path


def header_shapes(path: Any) -> dict[str, tuple[int, ...]]:
    return {key: tuple(info.shape) for key, info in read_header(path).tensors.items()}


def test_the_header_is_checked_against_the_composition_on_meta(tmp_path):
    manifest, path = composed_file(tmp_path, DNCNN)
    shapes = header_shapes(path)
    check_fit(shapes, manifest)  # fits: nothing raised
    plain = load_manifest(PLAIN)
    assert max_tensors(manifest) > max_tensors(plain)
    with pytest.raises(StateDictMismatchError, match="manifest has no denoiser"):
        check_fit(shapes, plain)
    wider = load_manifest(denoised({**DNCNN, "features": 16}))
    with pytest.raises(StateDictMismatchError, match=r"other shapes than the manifest's dncnn"):
        check_fit(shapes, wider)
    deeper = load_manifest(denoised({**DNCNN, "depth": 5}))
    with pytest.raises(StateDictMismatchError, match=r"denoiser\.\* tensors do not fit"):
        check_fit(shapes, deeper)
    classifier_only = {k: v for k, v in shapes.items() if not k.startswith("denoiser.")}
    with pytest.raises(StateDictMismatchError, match=r"no 'denoiser\.' tensors"):
        check_fit(classifier_only, manifest)
    wrong_classifier = {**shapes, "classifier.1.fc2.weight": (11, 84)}
    with pytest.raises(StateDictMismatchError, match="other shapes"):
        check_fit(wrong_classifier, manifest)


def test_the_entry_costs_its_denoiser_and_its_classifier():
    """Parameters and FLOPs per sample (``FlopCounterMode`` on ``meta``) add up: one denoiser
    pass and one classifier pass per noise sample. Ho et al.'s CIFAR-10 U-Net has 35.7M
    parameters (NeurIPS 2020, Appendix B), counted without allocating them."""
    ddpm = DENOISER_PRESETS["ddpm-cifar10-32"].model_dump(mode="json")
    manifest, plain = load_manifest(denoised(ddpm)), load_manifest(PLAIN)
    assert manifest.denoiser is not None
    with torch.device("meta"):
        unet = build_denoiser(manifest.denoiser, sigma=SIGMA, input_size=(3, 32, 32))
    alone = network_cost(unet, (3, 32, 32))
    assert round(alone.parameters / 1e6, 1) == 35.7
    assert manifest_cost(manifest) == alone + manifest_cost(plain)
    assert parameters_of(manifest) == alone.parameters + parameters_of(plain)
    shapes = denoiser_shapes(manifest.denoiser, sigma=SIGMA, input_size=(3, 32, 32))
    weights = sum(math.prod(shape) for shape in shapes.values())
    assert weights == alone.parameters  # a U-Net has no buffers in its state dict


def test_every_stage_loads_the_composition(tmp_path):
    """``models.stages.inputs.model_for``, the one function through which certification, PD,
    the heatmaps, the lens and the weather stages get their model, returns denoiser · classifier."""
    from models.stages.inputs import model_for

    manifest, path = composed_file(tmp_path, DNCNN)
    item = SimpleNamespace(submission_id=1, weights_path=path, manifest=manifest.model_dump())
    model = model_for(cast(Any, item), "cpu")
    assert isinstance(model, DenoisedClassifier)
    assert isinstance(model.denoiser, torch.nn.Module) and not model.training
