"""Parameters and FLOPs per sample (``certbench.nets.cost``), counted on the ``meta`` device:
equal to the closed forms of convolutions and matrix products, equal for a network with real
weights and its ``meta`` build, and as cheap for a 10¹²-parameter width as for a narrow one."""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from certbench.nets import build_classifier, load_manifest
from certbench.nets.cost import NetworkCost, manifest_cost, network_cost, parameters_of
from certbench.nets.meta import build_meta, meta_classifier
from tests.nets.test_library_architectures import RESNET, manifest
from tests.support.no_network import network_attempts


def conv_flops(out_channels: int, side: int, fan_in: int) -> int:
    """2 FLOPs per multiply-add: out_channels × side² outputs of fan_in products each."""
    return 2 * out_channels * side * side * fan_in


def test_flops_are_twice_the_multiply_adds_of_convolutions_and_matrix_products():
    linear = network_cost(nn.Linear(100, 10), (100,))
    assert linear == NetworkCost(parameters=100 * 10 + 10, flops_per_sample=2 * 100 * 10)
    conv = network_cost(nn.Conv2d(3, 8, 3, padding=1), (3, 32, 32))
    assert conv.flops_per_sample == conv_flops(8, 32, 3 * 3 * 3)
    lenet = manifest_cost(load_manifest(manifest({"name": "lenet5"})))
    assert lenet.flops_per_sample == (
        conv_flops(6, 28, 3 * 25) + conv_flops(16, 10, 6 * 25) + conv_flops(120, 1, 16 * 25)
        + 2 * 120 * 84 + 2 * 84 * 10
    )  # fmt: skip
    assert lenet.parameters == 62_006


def test_a_network_with_weights_is_counted_on_a_meta_copy_and_left_as_it_was():
    spec = load_manifest(manifest(RESNET))
    torch.manual_seed(0)
    model = build_classifier(RESNET["name"], num_classes=10, mean=[0.5] * 3, std=[0.25] * 3,
                             **RESNET["kwargs"])  # fmt: skip
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert network_cost(model, (3, 32, 32)) == manifest_cost(spec)
    assert model.training and all(not p.is_meta for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def vit(width: int) -> dict[str, Any]:
    kwargs = {"img_size": 32, "patch_size": 4, "depth": 4, "embed_dim": width, "num_heads": 4}
    return manifest({"name": "timm/vit_tiny_patch16_224", "kwargs": kwargs})


def _best_of_three(spec_doc: dict[str, Any]) -> tuple[float, NetworkCost]:
    """Seconds to check a manifest and count its network on ``meta`` from scratch (caches
    emptied), best of three."""
    times = []
    for _ in range(3):
        build_meta.cache_clear()
        started = time.perf_counter()
        spec = load_manifest(spec_doc)
        parameters = parameters_of(spec)
        cost = manifest_cost(spec)
        times.append(time.perf_counter() - started)
        assert cost.parameters == parameters
    return min(times), cost


def test_a_trillion_parameter_width_costs_no_more_to_count_than_a_narrow_one():
    """Counting never allocates a weight: the cost of judging a network does not grow with its
    width (the reference is the same ViT 4096 times narrower, in the same process)."""
    _best_of_three(vit(64))  # imports and first-call set-up
    with network_attempts() as attempts:
        narrow_seconds, narrow = _best_of_three(vit(64))
        wide_seconds, wide = _best_of_three(vit(262_144))
    assert attempts == []
    assert wide.parameters > 10**12 > narrow.parameters
    assert wide.flops_per_sample > 10**14
    assert all(p.is_meta for p in meta_classifier(load_manifest(vit(262_144))).parameters())
    print(
        f"\ncounted on meta: ViT width 64 ({narrow.parameters:,} parameters) "
        f"{narrow_seconds:.3f} s, width 262,144 ({wide.parameters:,}) {wide_seconds:.3f} s"
    )
    assert wide_seconds < 3 * narrow_seconds
