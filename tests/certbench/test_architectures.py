"""The architecture registry: shapes, Cohen-compatible layout, parameter counts, allow-lists."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from certbench.errors import ManifestError, UnknownArchitectureError
from certbench.nets.architectures import (
    NormalizeLayer,
    available_architectures,
    build_classifier,
    create_architecture,
    get_spec,
    register_architecture,
)

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2023, 0.1994, 0.2010)
# Small settings so the registry-wide tests stay cheap on 2 CPU cores.
SMALL_KWARGS = {"wrn": {"depth": 10, "widen_factor": 1}}


def _params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_registry_holds_the_promised_names() -> None:
    assert set(available_architectures()) >= {
        "cifar_resnet20",
        "cifar_resnet56",
        "cifar_resnet110",
        "wrn",
        "lenet5",
    }
    assert available_architectures() == sorted(available_architectures())


@pytest.mark.parametrize("name", available_architectures())
@pytest.mark.parametrize("num_classes", [10, 100])
def test_output_shape(name: str, num_classes: int) -> None:
    torch.manual_seed(0)
    model = build_classifier(
        name, num_classes=num_classes, mean=CIFAR_MEAN, std=CIFAR_STD, **SMALL_KWARGS.get(name, {})
    ).eval()
    with torch.no_grad():
        out = model(torch.rand(2, 3, 32, 32))
    assert out.shape == (2, num_classes)
    assert torch.isfinite(out).all()
    assert isinstance(model[0], NormalizeLayer)


@pytest.mark.parametrize("name", available_architectures())
def test_normalize_layer_adds_no_state_dict_keys(name: str) -> None:
    model = build_classifier(
        name, num_classes=10, mean=CIFAR_MEAN, std=CIFAR_STD, **SMALL_KWARGS.get(name, {})
    )
    keys = list(model.state_dict())
    assert keys and all(k.startswith("1.") for k in keys)
    assert keys == ["1." + k for k in model[1].state_dict()]


def _expected_cifar_resnet_params(depth: int, num_classes: int) -> int:
    """Parameter count derived by hand from Cohen et al.'s archs/cifar_resnet.py structure.

    Stem conv 3->16 (3x3, no bias) + BN; per stage n BasicBlocks of two 3x3 convs (no bias) + two
    BNs (weight+bias = 2*width each); the first block of stages 2 and 3 adds a 1x1 projection conv
    + BN; fc 64 -> classes with bias.
    """
    n = (depth - 2) // 6
    total = 3 * 16 * 9 + 2 * 16
    in_planes = 16
    for width in (16, 32, 64):
        for block in range(n):
            cin = in_planes if block == 0 else width
            total += cin * width * 9 + width * width * 9 + 2 * (2 * width)
            if block == 0 and cin != width:
                total += cin * width + 2 * width
        in_planes = width
    return total + 64 * num_classes + num_classes


def test_cifar_resnet110_parameter_count_matches_cohen() -> None:
    expected = _expected_cifar_resnet_params(110, 10)
    # The figure quoted for the bearpaw/Cohen ResNet-110 with projection shortcuts.
    assert expected == 1_730_714
    assert _params(create_architecture("cifar_resnet110", num_classes=10)) == expected


@pytest.mark.parametrize(("name", "depth"), [("cifar_resnet20", 20), ("cifar_resnet56", 56)])
@pytest.mark.parametrize("num_classes", [10, 100])
def test_cifar_resnet_parameter_counts(name: str, depth: int, num_classes: int) -> None:
    count = _params(create_architecture(name, num_classes=num_classes))
    assert count == _expected_cifar_resnet_params(depth, num_classes)
    if name == "cifar_resnet20" and num_classes == 10:
        assert count == 272_474  # "0.27M" in He et al. (2016), Table 6


def test_wrn_28_10_default_parameter_count() -> None:
    # WRN-28-10 for CIFAR-10 has 36.5M parameters (Zagoruyko & Komodakis 2016, Table 3):
    # 36,479,194 with bias-free convs, as in the authors' code.
    assert _params(create_architecture("wrn", num_classes=10)) == 36_479_194


def test_lenet5_has_lecuns_layer_sizes() -> None:
    # C1 6@5x5, C3 16@5x5 (every S2 map feeding every C3 map), C5 120@5x5, F6 84, output.
    net = create_architecture("lenet5", num_classes=10)
    expected = (3 * 25 + 1) * 6 + (6 * 25 + 1) * 16 + (16 * 25 + 1) * 120 + 121 * 84 + 85 * 10
    assert _params(net) == expected == 62_006
    shapes = {name: tuple(p.shape) for name, p in net.named_parameters()}
    assert shapes["conv3.weight"] == (120, 16, 5, 5) and shapes["fc2.weight"] == (10, 84)


def _expected_cohen_keys(depth: int) -> set[str]:
    """State-dict keys of ``Sequential(normalize, resnet)`` in locuslab/smoothing, by its rules."""
    bn = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
    keys = {"1.conv1.weight", "1.fc.weight", "1.fc.bias"} | {f"1.bn1.{s}" for s in bn}
    for stage in (1, 2, 3):
        for block in range((depth - 2) // 6):
            prefix = f"1.layer{stage}.{block}"
            keys |= {f"{prefix}.conv1.weight", f"{prefix}.conv2.weight"}
            keys |= {f"{prefix}.bn{i}.{s}" for i in (1, 2) for s in bn}
            if block == 0 and stage > 1:
                keys.add(f"{prefix}.downsample.0.weight")
                keys |= {f"{prefix}.downsample.1.{s}" for s in bn}
    return keys


@pytest.mark.parametrize(("name", "depth"), [("cifar_resnet20", 20), ("cifar_resnet110", 110)])
def test_state_dict_keys_match_cohen_layout(name: str, depth: int) -> None:
    model = build_classifier(name, num_classes=10, mean=CIFAR_MEAN, std=CIFAR_STD)
    state = model.state_dict()
    assert set(state) == _expected_cohen_keys(depth)
    assert state["1.layer1.0.conv1.weight"].shape == (16, 16, 3, 3)
    assert state["1.layer2.0.downsample.0.weight"].shape == (32, 16, 1, 1)
    assert state["1.layer3.0.downsample.0.weight"].shape == (64, 32, 1, 1)
    assert state["1.fc.weight"].shape == (10, 64)


def test_normalize_layer_math_and_buffers() -> None:
    layer = NormalizeLayer([0.5, 0.25, 0.0], [0.5, 0.25, 2.0])
    x = torch.rand(4, 3, 5, 5)
    y = layer(x)
    assert torch.allclose(y[:, 0], (x[:, 0] - 0.5) / 0.5)
    assert torch.allclose(y[:, 1], (x[:, 1] - 0.25) / 0.25)
    assert torch.allclose(y[:, 2], x[:, 2] / 2.0)
    assert layer.state_dict() == {}
    assert {name for name, _ in layer.named_buffers()} == {"mean", "std"}
    assert layer.to(torch.float64).mean.dtype == torch.float64  # buffers follow .to()


@pytest.mark.parametrize(
    ("mean", "std", "phrase"),
    [((0.5, 0.5), (0.5,), "equal lengths"), ((0.5,), (0.0,), "std values must be > 0"),
     ((0.5,), (1e-300,), "below float32's smallest normal"),
     ((1e39,), (0.5,), "beyond float32's range")],
)  # fmt: skip
def test_normalize_layer_rejects_bad_statistics(mean, std, phrase) -> None:
    with pytest.raises(ManifestError, match=phrase):
        NormalizeLayer(mean, std)


def test_unknown_architecture_lists_known_names() -> None:
    with pytest.raises(UnknownArchitectureError, match="resnet18") as info:
        create_architecture("resnet18", num_classes=10)
    for name in available_architectures():
        assert name in str(info.value)


@pytest.mark.parametrize(
    ("name", "kwargs", "phrase"),
    [
        ("cifar_resnet110", {"depth": 56}, "does not accept kwarg\\(s\\) 'depth'; allowed: none"),
        ("wrn", {"block": "Bottleneck"}, "'block'"),
        ("wrn", {"depth": 27}, "depth must be 6n\\+4"),
        ("wrn", {"depth": 100}, "'depth'=100 is outside"),
        ("wrn", {"widen_factor": 2.5}, "'widen_factor' must be int"),
        ("wrn", {"widen_factor": True}, "'widen_factor' must be int"),
        ("wrn", {"dropout": 1.5}, "'dropout'=1.5 is outside"),
        ("wrn", {"dropout": "0.3"}, "'dropout' must be float"),
    ],
)
def test_kwargs_outside_allow_list_are_refused(name, kwargs, phrase) -> None:
    with pytest.raises(ManifestError, match=phrase):
        create_architecture(name, num_classes=10, **kwargs)


def test_allowed_kwargs_are_coerced_and_used() -> None:
    model = create_architecture("wrn", num_classes=10, depth=10, widen_factor=2, dropout=0)
    assert len(model.layer1) == 1
    assert model.fc.in_features == 128
    assert isinstance(model.layer1[0].dropout.p, float)


@pytest.mark.parametrize("num_classes", [1, 0, 2.0, True])
def test_num_classes_must_be_an_integer_of_at_least_two(num_classes) -> None:
    with pytest.raises(ManifestError, match="num_classes"):
        create_architecture("cifar_resnet20", num_classes=num_classes)


def test_duplicate_registration_is_refused() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_architecture("cifar_resnet20")(lambda *, num_classes: nn.Identity())
    assert get_spec("cifar_resnet20").doc.startswith("CIFAR ResNet-20")


def test_the_torch_free_list_of_names_is_the_registry() -> None:
    from certbench.nets import ARCHITECTURE_NAMES

    assert list(ARCHITECTURE_NAMES) == available_architectures()
