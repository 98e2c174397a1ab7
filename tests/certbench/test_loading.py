"""Safe model loading: every bad submission gives its own clear error; good ones round-trip."""

from __future__ import annotations

import io
import json
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import save

from certbench.errors import (
    InputSizeError,
    ManifestError,
    ModelOutputError,
    NonFiniteOutputError,
    NonFiniteWeightsError,
    StateDictMismatchError,
    UnknownArchitectureError,
    WeightsFormatError,
)
from certbench.nets.architectures import build_classifier
from certbench.nets.loading import (
    Manifest,
    check_model,
    load_manifest,
    load_model,
    read_safetensors,
    save_weights,
)

MEAN = [0.4914, 0.4822, 0.4465]
STD = [0.2023, 0.1994, 0.2010]


def manifest_dict(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "benchmark": "cifar10-f",
        "architecture": {"name": "cifar_resnet20", "kwargs": {}},
        "num_classes": 10,
        "preprocessing": {"mean": MEAN, "std": STD},
        "smoothing": {"sigma": 0.25},
        "metadata": {
            "name": "Gaussian augmentation",
            "authors": ["A. Author"],
            "paper_url": "https://arxiv.org/abs/1902.02918",
            "code_url": None,
            "licence": "MIT",
        },
    }
    doc.update(overrides)
    return doc


def trained_like(num_classes: int = 10, seed: int = 0) -> torch.nn.Sequential:
    """A cifar_resnet20 with non-trivial BatchNorm statistics, as after training."""
    torch.manual_seed(seed)
    model = build_classifier("cifar_resnet20", num_classes=num_classes, mean=MEAN, std=STD)
    model.train()
    with torch.no_grad():
        model(torch.rand(8, 3, 32, 32))
    return model.eval()


def state_bytes(model: torch.nn.Module, **edits: torch.Tensor | None) -> bytes:
    """Safetensors bytes of the model's state dict with some keys replaced (None drops a key)."""
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for key, value in edits.items():
        if value is None:
            state.pop(key)
        else:
            state[key] = value
    return save(state)


@pytest.fixture(scope="module")
def model() -> torch.nn.Sequential:
    return trained_like()


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    return load_manifest(manifest_dict())


# --- round trip ---------------------------------------------------------------------------------


def test_save_then_load_gives_identical_outputs(model, manifest, tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    save_weights(model, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]  # no temp left
    loaded = load_model(path, manifest)
    assert not loaded.training
    x = torch.rand(4, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value)


def test_bare_network_keys_are_accepted(model, manifest) -> None:
    # A checkpoint of the network alone (no NormalizeLayer wrapper), without BN counters.
    bare = {
        k.removeprefix("1."): v for k, v in model.state_dict().items() if "num_batches" not in k
    }
    loaded = load_model(save(bare), manifest, device="cpu")
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_half_precision_weights_load(model, manifest) -> None:
    half = {k: v.half() if v.is_floating_point() else v for k, v in model.state_dict().items()}
    loaded = load_model(save(half), manifest)
    assert loaded[1].fc.weight.dtype == torch.float32
    assert torch.equal(loaded[1].fc.weight, model[1].fc.weight.half().float())


def test_normalization_comes_from_the_manifest(model, tmp_path: Path) -> None:
    other = load_manifest(manifest_dict(preprocessing={"mean": [0, 0, 0], "std": [1, 1, 1]}))
    loaded = load_model(state_bytes(model), other)
    assert loaded[0].mean.flatten().tolist() == [0.0, 0.0, 0.0]
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(loaded(x), model[1](x))


# --- weights file format ------------------------------------------------------------------------


def test_pickle_file_is_refused_and_never_executed(model, manifest, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.mkdir, (str(marker),))

    path = tmp_path / "model.safetensors"
    path.write_bytes(pickle.dumps({"1.fc.weight": Payload()}))
    with pytest.raises(WeightsFormatError, match="pickle"):
        load_model(path, manifest)
    assert not marker.exists()


def test_plain_pickled_dict_is_refused(manifest) -> None:
    blob = pickle.dumps({"1.fc.weight": [[0.0] * 64] * 10})
    with pytest.raises(WeightsFormatError, match=r"pickle / torch\.save"):
        load_model(blob, manifest)


def test_torch_save_archive_is_refused(model, manifest) -> None:
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)  # written by the test; we only check it is refused
    with pytest.raises(WeightsFormatError, match=r"pickle / torch\.save"):
        load_model(buffer.getvalue(), manifest)


@pytest.mark.parametrize(
    ("mangle", "phrase"),
    [
        (lambda b: b[: len(b) // 2], "not a valid safetensors file"),
        (lambda b: b[:100], "not a valid safetensors file"),
        (lambda b: bytes(range(7)), "only 7 bytes"),
        (lambda b: b"", "only 0 bytes"),
        (lambda b: np.random.default_rng(1).bytes(4096), "not a valid safetensors file"),
    ],
    ids=["truncated-half", "truncated-header", "tiny", "empty", "random"],
)
def test_broken_bytes_are_refused(model, manifest, tmp_path: Path, mangle, phrase) -> None:
    blob = mangle(state_bytes(model))
    with pytest.raises(WeightsFormatError, match=phrase):
        load_model(blob, manifest)
    path = tmp_path / "broken.safetensors"
    path.write_bytes(blob)
    with pytest.raises(WeightsFormatError, match=phrase):
        read_safetensors(path)


def test_missing_weights_file(manifest, tmp_path: Path) -> None:
    with pytest.raises(WeightsFormatError, match="cannot read weights file"):
        load_model(tmp_path / "absent.safetensors", manifest)
    with pytest.raises(WeightsFormatError, match="cannot read weights file"):
        load_model(tmp_path, manifest)  # a directory


def test_size_cap(model, manifest, tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    save_weights(model, path)
    size = path.stat().st_size
    with pytest.raises(WeightsFormatError, match=f"{size} bytes, above the limit of 1000"):
        load_model(path, manifest, max_bytes=1000)
    with pytest.raises(WeightsFormatError, match="above the limit"):
        read_safetensors(path.read_bytes(), max_bytes=size - 1)
    assert len(read_safetensors(path, max_bytes=size)) == len(model.state_dict())


def test_integer_weights_are_refused(model, manifest) -> None:
    blob = state_bytes(model, **{"1.fc.weight": torch.zeros(10, 64, dtype=torch.int32)})
    with pytest.raises(WeightsFormatError, match=r"'1\.fc\.weight' has dtype torch\.int32"):
        load_model(blob, manifest)


# --- state dict ---------------------------------------------------------------------------------


def test_missing_keys(model, manifest) -> None:
    blob = state_bytes(model, **{"1.fc.weight": None, "1.layer3.2.bn2.running_var": None})
    with pytest.raises(StateDictMismatchError) as info:
        load_model(blob, manifest)
    message = str(info.value)
    assert "missing keys (2): 1.fc.weight, 1.layer3.2.bn2.running_var" in message
    assert "unexpected" not in message and "cifar_resnet20" in message


def test_unexpected_keys(model, manifest) -> None:
    blob = state_bytes(model, **{"1.head.weight": torch.zeros(3)})
    with pytest.raises(StateDictMismatchError, match=r"unexpected keys \(1\): 1\.head\.weight"):
        load_model(blob, manifest)


def test_weights_of_another_architecture(manifest) -> None:
    deeper = build_classifier("cifar_resnet56", num_classes=10, mean=MEAN, std=STD)
    with pytest.raises(StateDictMismatchError, match=r"unexpected keys \(\d+\): 1\.layer1\.3\."):
        load_model(state_bytes(deeper), manifest)


def test_mixed_key_layouts_are_reported(model, manifest) -> None:
    state = dict(model.state_dict())
    state["fc.bias"] = state.pop("1.fc.bias")
    with pytest.raises(StateDictMismatchError) as info:
        load_model(save(state), manifest)
    assert "missing keys (1): 1.fc.bias" in str(info.value)
    assert "unexpected keys (1): fc.bias" in str(info.value)


def test_shape_mismatch_names_key_and_shapes(manifest) -> None:
    cifar100 = trained_like(num_classes=100)
    with pytest.raises(StateDictMismatchError) as info:
        load_model(state_bytes(cifar100), manifest)
    message = str(info.value)
    assert "shape mismatches (2)" in message
    assert "1.fc.weight: weights (100, 64) vs model (10, 64)" in message
    assert "1.fc.bias: weights (100,) vs model (10,)" in message


# --- forward checks -----------------------------------------------------------------------------


def test_wrong_number_of_outputs(manifest) -> None:
    cifar100 = trained_like(num_classes=100)
    with pytest.raises(ModelOutputError, match=r"shape \(2, 100\), expected \(2, 10\)"):
        check_model(cifar100, manifest)


def test_non_finite_outputs(model, manifest) -> None:
    huge = torch.full_like(model.state_dict()["1.fc.weight"], 3e38)  # finite, but overflows
    with pytest.raises(NonFiniteOutputError, match="outputs are not finite"):
        load_model(state_bytes(model, **{"1.fc.weight": huge}), manifest)


def test_non_finite_weights_are_named_before_anything_runs(model, manifest) -> None:
    weight = model.state_dict()["1.fc.weight"].clone()
    weight[3, 5] = float("nan")
    with pytest.raises(NonFiniteWeightsError, match=r"1\.fc\.weight \(1 NaN of 640 values\)"):
        load_model(state_bytes(model, **{"1.fc.weight": weight}), manifest)
    inf_bias = torch.full((10,), float("inf"))
    with pytest.raises(NonFiniteWeightsError, match=r"1\.fc\.bias \(10 ±inf of 10 values\)"):
        load_model(state_bytes(model, **{"1.fc.bias": inf_bias}), manifest)


@pytest.mark.parametrize("size", [[3, 64, 64], [3, 16, 16], [1, 32, 32]])
def test_input_size_the_architecture_cannot_take(model, size: list[int]) -> None:
    channels = size[0]
    doc = manifest_dict(
        input_size=size, preprocessing={"mean": [0.5] * channels, "std": [0.25] * channels}
    )
    with pytest.raises(InputSizeError, match=rf"input_size \({size[0]}, {size[1]}, {size[2]}\)"):
        load_model(state_bytes(model), load_manifest(doc))


def test_check_model_leaves_eval_mode_and_no_grad(model, manifest) -> None:
    model.train()
    check_model(model, manifest, batch=3)
    assert not model.training
    assert all(p.grad is None for p in model.parameters())


# --- manifest -----------------------------------------------------------------------------------


def test_manifest_sources_agree(tmp_path: Path) -> None:
    doc = manifest_dict()
    text = json.dumps(doc)
    path = tmp_path / "manifest.json"
    path.write_text(text)
    parsed = [load_manifest(src) for src in (doc, text, text.encode(), path, str(path))]
    assert all(m == parsed[0] for m in parsed)
    assert parsed[0].input_size == (3, 32, 32)
    assert parsed[0].smoothing.sigma == 0.25


def test_canonical_json_ignores_key_order() -> None:
    doc = manifest_dict()
    reordered = dict(reversed(list(doc.items())))
    reordered["preprocessing"] = {"std": STD, "mean": MEAN}
    a, b = load_manifest(doc), load_manifest(json.dumps(reordered))
    assert a.canonical_json() == b.canonical_json()
    assert ", " not in a.canonical_json() and '": ' not in a.canonical_json()
    assert json.loads(a.canonical_json())["architecture"] == {
        "kwargs": {},
        "name": "cifar_resnet20",
    }
    changed = load_manifest(manifest_dict(smoothing={"sigma": 0.5}))
    assert changed.canonical_json() != a.canonical_json()


@pytest.mark.parametrize(
    ("overrides", "phrase"),
    [
        ({"sigma_typo": 0.25}, "sigma_typo: Extra inputs are not permitted"),
        ({"smoothing": {"sigma": 0}}, "smoothing.sigma: Input should be greater than 0"),
        ({"smoothing": {"sigma": -0.5}}, "smoothing.sigma"),
        ({"num_classes": 1}, "num_classes: Input should be greater than or equal to 2"),
        ({"num_classes": "ten"}, "num_classes"),
        ({"preprocessing": {"mean": [0.5], "std": [0.25]}}, "preprocessing.mean has 1 values"),
        ({"preprocessing": {"mean": MEAN, "std": [0.2, 0.0, 0.2]}}, "std values must be > 0"),
        ({"input_size": [3, 32]}, "input_size"),
        ({"architecture": {"name": "wrn", "extra": 1}}, "architecture.extra: Extra inputs"),
        ({"architecture": {"name": "wrn", "kwargs": {"depth": {"n": 28}}}}, "architecture.kwargs"),
        ({"metadata": {"name": "x", "paper_url": "not a url"}}, "metadata.paper_url"),
        ({"metadata": {}}, "metadata.name: Field required"),
    ],
)
def test_invalid_manifest_fields(overrides: dict[str, Any], phrase: str) -> None:
    with pytest.raises(ManifestError, match="invalid manifest") as info:
        load_manifest(manifest_dict(**overrides))
    assert phrase in str(info.value)


def test_missing_section_is_named() -> None:
    doc = manifest_dict()
    del doc["smoothing"]
    with pytest.raises(ManifestError, match="smoothing: Field required"):
        load_manifest(doc)


@pytest.mark.parametrize("text", ['{"benchmark": "cifar10-f",', "{not json}", "{}}"])
def test_bad_json(text: str) -> None:
    with pytest.raises(ManifestError, match="Invalid JSON"):
        load_manifest(text)
    with pytest.raises(ManifestError, match="Invalid JSON"):
        load_manifest(text.encode())


def test_missing_manifest_file(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="cannot read manifest file"):
        load_manifest(tmp_path / "absent.json")


def test_unknown_architecture_in_manifest() -> None:
    with pytest.raises(UnknownArchitectureError, match=r"'resnet50'.*cifar_resnet110"):
        load_manifest(manifest_dict(architecture={"name": "resnet50"}))


def test_unknown_architecture_at_load_time(model) -> None:
    # A Manifest built directly skips load_manifest's registry check; load_model still refuses.
    manifest = Manifest.model_validate(manifest_dict(architecture={"name": "vit_huge"}))
    with pytest.raises(UnknownArchitectureError, match="vit_huge"):
        load_model(state_bytes(model), manifest)


@pytest.mark.parametrize(
    ("architecture", "phrase"),
    [
        ({"name": "cifar_resnet110", "kwargs": {"depth": 56}}, "does not accept kwarg(s) 'depth'"),
        ({"name": "wrn", "kwargs": {"depth": 22, "groups": 2}}, "'groups'; allowed: depth"),
        ({"name": "wrn", "kwargs": {"widen_factor": 64}}, "'widen_factor'=64 is outside"),
    ],
)
def test_kwargs_outside_the_allow_list(architecture: dict[str, Any], phrase: str) -> None:
    with pytest.raises(ManifestError) as info:
        load_manifest(manifest_dict(architecture=architecture))
    assert phrase in str(info.value)


def test_wrn_kwargs_round_trip(tmp_path: Path) -> None:
    doc = manifest_dict(
        architecture={"name": "wrn", "kwargs": {"depth": 10, "widen_factor": 1, "dropout": 0.3}},
        num_classes=100,
    )
    manifest = load_manifest(doc)
    torch.manual_seed(0)
    net = build_classifier(
        "wrn", num_classes=100, mean=MEAN, std=STD, **doc["architecture"]["kwargs"]
    )
    save_weights(net, tmp_path / "wrn.safetensors")
    loaded = load_model(tmp_path / "wrn.safetensors", manifest)
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded(x), net.eval()(x))


def test_save_weights_writes_plain_safetensors(model, tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_weights(model, path)
    tensors = read_safetensors(path)
    assert set(tensors) == set(model.state_dict())
    assert tensors["1.bn1.num_batches_tracked"].dtype == torch.int64
