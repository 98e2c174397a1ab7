"""timm and torchvision architectures in manifests (issue 33 §1): names checked against the
library's registry (with a did-you-mean), keyword arguments against the allow-list, keys that name
something to load refused by name before anything is imported or built, and the network built
without pretrained weights, alike on the ``meta`` device (intake) and on the CPU (workers, CLI)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import timm
import torch

from certbench.errors import ManifestError, UnknownArchitectureError
from certbench.nets import build_classifier, load_manifest, load_model, save_weights
from certbench.nets.fit import check_fit, expected_shapes
from certbench.nets.header import read_header
from certbench.nets.libraries import architecture_provenance, create_library_model
from certbench.nets.library_kwargs import ALLOWED_KWARGS, refused_key
from certbench.nets.meta import meta_classifier
from tests.support.no_network import network_attempts

RESNET = {"name": "timm/resnet18", "kwargs": {"channels": [8, 16, 32, 64], "stem_width": 8,
                                              "layers": [1, 1, 1, 1]}}  # fmt: skip
VIT = {"name": "timm/vit_tiny_patch16_224", "kwargs": {
    "img_size": 32, "patch_size": 8, "depth": 2, "embed_dim": 24, "num_heads": 2}}  # fmt: skip


def manifest(architecture: dict[str, Any], channels: int = 3) -> dict[str, Any]:
    return {
        "benchmark": "demo-digits",
        "architecture": architecture,
        "num_classes": 10,
        "preprocessing": {"mean": [0.5] * channels, "std": [0.25] * channels},
        "smoothing": {"sigma": 0.5},
        "metadata": {"name": "a library network"},
        "input_size": [channels, 32, 32],
    }


HOSTILE = [
    ("pretrained", True),
    ("checkpoint_path", "/root/.cache/torch/hub/checkpoints/resnet18.pth"),
    ("pretrained_cfg", {"url": "https://example.org/resnet18.pth"}),
    ("pretrained_cfg_overlay", {"file": "/etc/passwd"}),
    ("file", "/etc/passwd"),
    ("url", "https://example.org/weights.pth"),
    ("hf_hub_id", "timm/resnet18.a1_in1k"),
    ("cache_dir", "/tmp"),
]


@pytest.mark.parametrize(("key", "value"), HOSTILE)
def test_a_kwarg_naming_something_to_load_is_refused_by_name_without_network(key, value):
    with network_attempts() as attempts, pytest.raises(ManifestError) as refused:
        load_manifest(manifest({"name": "timm/resnet18", "kwargs": {key: value}}))
    message = str(refused.value)
    assert f"architecture kwarg {key!r} is refused" in message
    assert "file, URL, checkpoint or pretrained configuration" in message
    assert attempts == []


def test_the_network_guard_sees_an_attempt():
    """The guard of these tests records what a download would do (its precondition)."""
    import urllib.request

    with network_attempts() as attempts, pytest.raises(OSError):
        urllib.request.urlopen("https://huggingface.co", timeout=5)
    assert attempts and "huggingface.co" in attempts[0]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("timm/resnet_18", "did you mean timm/resnet18"),
        ("timm/vit_tiny_patch16", "timm/vit_tiny_patch16_224 or"),
        ("timm/resnet18.a1_in1k", "names a pretrained configuration ('resnet18.a1_in1k')"),
        ("timm/hf-hub:timm/resnet18.a1_in1k", "use timm/resnet18"),
        ("torchvision/resnet_18", "did you mean torchvision/resnet18"),
        ("keras/resnet18", "one of timm, torchvision"),
        ("resnet20", "did you mean 'cifar_resnet20'"),
    ],
)
def test_an_unknown_name_is_refused_with_the_closest_registered_ones(name, expected):
    with network_attempts() as attempts, pytest.raises(UnknownArchitectureError) as refused:
        load_manifest(manifest({"name": name}))
    assert expected in str(refused.value)
    assert attempts == []


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"act_layer": "gelu"}, "architecture kwarg 'act_layer' is not allowed"),
        ({"num_classes": 3}, "set from the manifest's num_classes"),
        ({"in_chans": 1}, "set from the manifest's input_size[0]"),
        ({"global_pool": "attention"}, "'attention' is not one of"),
        ({"depth": 1000}, "outside [1, 64]"),
        ({"layers": [1] * 9}, "kwargs.layers: Value error, a list must hold 1 to 8"),
        ({"layers": 2}, "takes a list"),
        ({"drop_path_rate": "0.1"}, "must be float"),
        ({"qkv_bias": 1}, "must be true or false"),
    ],
)
def test_kwargs_outside_the_allow_list_are_refused_naming_the_key(kwargs, expected):
    with pytest.raises(ManifestError) as refused:
        load_manifest(manifest({"name": "timm/resnet18", "kwargs": kwargs}))
    assert expected in str(refused.value)


def test_only_loading_keys_are_refused_by_name():
    """Allowed keys that merely contain a refused word (``drop_path_rate``: "path") pass."""
    assert all(refused_key(key) is None for key in ALLOWED_KWARGS)
    assert refused_key("checkpoint_filter_fn") is not None and refused_key("weights") is not None


def test_a_kwarg_the_model_does_not_take_is_named_by_the_library():
    spec = load_manifest(manifest({"name": "timm/resnet18", "kwargs": {"depths": [1, 1]}}))
    with pytest.raises(ManifestError, match=r"cannot build 'resnet18' with depths=\[1, 1\].*"
                       "unexpected keyword argument 'depths'"):  # fmt: skip
        meta_classifier(spec)


@pytest.mark.parametrize(
    "architecture",
    [RESNET, VIT, {"name": "torchvision/mobilenet_v3_small", "kwargs": {"dropout": 0.1}}],
    ids=["timm-resnet", "timm-vit", "torchvision-mobilenet"],
)
def test_meta_and_cpu_builds_agree_and_the_weights_load_back(architecture, tmp_path: Path):
    """Intake's network (``meta``, no memory) has the state dict of the workers' (CPU), the
    weights of one load strictly into the other, and nothing reaches for the network."""
    spec = load_manifest(manifest(architecture))
    with network_attempts() as attempts:
        torch.manual_seed(0)
        model = build_classifier(
            architecture["name"], num_classes=10, mean=[0.5] * 3, std=[0.25] * 3,
            **architecture["kwargs"],
        )  # fmt: skip
        shapes = {key: tuple(t.shape) for key, t in model.state_dict().items()}
        assert expected_shapes(spec) == shapes
        save_weights(model, tmp_path / "model.safetensors")
        header = read_header(tmp_path / "model.safetensors")
        check_fit({k: v.shape for k, v in header.tensors.items()}, spec)
        loaded = load_model(tmp_path / "model.safetensors", spec)
    assert attempts == []
    images = torch.rand((2, 3, 32, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(loaded(images), model.eval()(images))


def test_in_chans_comes_from_the_manifests_input_size():
    spec = load_manifest(manifest(RESNET, channels=1))
    assert expected_shapes(spec)["1.conv1.weight"][1] == 1
    with pytest.raises(ManifestError, match="torchvision models take 3 input channels"):
        meta_classifier(load_manifest(manifest({"name": "torchvision/resnet18"}, channels=1)))


def test_library_networks_are_built_without_pretrained_weights(monkeypatch: pytest.MonkeyPatch):
    """timm is called with pretrained=False whatever the manifest says (it cannot say more)."""
    seen: list[dict[str, Any]] = []
    real = timm.create_model

    def spy(name: str, **kwargs: Any) -> torch.nn.Module:
        seen.append({"name": name, **kwargs})
        return real(name, **kwargs)

    monkeypatch.setattr(timm, "create_model", spy)
    with torch.device("meta"):
        create_library_model("timm/resnet18", num_classes=7, in_chans=2, kwargs={})
    assert seen == [{"name": "resnet18", "pretrained": False, "num_classes": 7, "in_chans": 2}]


def test_the_library_version_is_recorded():
    assert architecture_provenance("timm/resnet18") == {
        "name": "timm/resnet18", "library": "timm", "version": timm.__version__,
    }  # fmt: skip
    assert architecture_provenance("lenet5")["library"] == "certbench"
