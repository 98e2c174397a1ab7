"""What one forward pass of a network costs: its parameters and its FLOPs per sample.

Randomized smoothing classifies every image n0 + n times under noise (Cohen, Rosenfeld & Kolter,
ICML 2019, "Certified Adversarial Robustness via Randomized Smoothing", arXiv:1902.02918), so the
cost of certifying an image is (n0 + n) forward passes of the base classifier; with a denoiser in
front (Salman et al., NeurIPS 2020, arXiv:2003.01908; Carlini et al., ICLR 2023,
arXiv:2206.10550) the denoiser's pass is part of each. Intake caps both figures per benchmark
(``models.benchmarks.definitions.CostLimits``), and the figures are what "cost per certified
image" multiplies.

FLOPs are counted by ``torch.utils.flop_counter.FlopCounterMode`` on the ``meta`` device: the
forward runs on shape-only tensors, so counting a 10¹²-parameter network allocates nothing and
takes as long as its module calls. The counter's convention is the usual one: 2 FLOPs per
multiply-add of convolutions, matrix products and attention (``scaled_dot_product_attention``);
element-wise work (activations, normalisation, additions, pooling) is not counted. Counted for one
input of the given (C, H, W), i.e. per noise sample.

Public entry points: :func:`network_cost` (any ``nn.Module``: a network built on ``meta``, or
one with real weights, which is counted on a ``meta`` copy of its structure) and
:func:`manifest_cost` (a manifest's classifier, built on ``meta`` once and cached).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from certbench.errors import InputSizeError

if TYPE_CHECKING:
    from torch import nn

    from certbench.nets.manifest import Manifest
    from certbench.nets.meta import MetaKey

__all__ = ["NetworkCost", "count_parameters", "manifest_cost", "network_cost", "parameters_of"]


@dataclass(frozen=True)
class NetworkCost:
    """One forward pass per sample: ``parameters`` (trainable and frozen parameters, not
    buffers) and ``flops_per_sample`` (``FlopCounterMode``'s count for one input)."""

    parameters: int
    flops_per_sample: int

    def to_dict(self) -> dict[str, int]:
        """``{"parameters": ..., "flops_per_sample": ...}`` for JSON records."""
        return asdict(self)

    def __add__(self, other: NetworkCost) -> NetworkCost:
        """Two networks run one after the other on each sample (a denoiser, then a classifier)."""
        return NetworkCost(
            self.parameters + other.parameters, self.flops_per_sample + other.flops_per_sample
        )


def count_parameters(model: nn.Module) -> int:
    """Elements of ``model``'s parameters (shared ones once), on any device, ``meta`` included."""
    return sum(p.numel() for p in model.parameters())


def network_cost(model: nn.Module, input_size: Sequence[int]) -> NetworkCost:
    """Parameters and FLOPs per sample of ``model`` on one input of shape ``input_size``
    (C, H, W; values in [0, 1] for a certbench classifier), counted on the ``meta`` device.

    A model with real weights is counted on a ``meta`` copy of its structure (no weight is
    copied); the model itself is not changed. The forward runs in eval mode with autograd on
    (``FlopCounterMode`` tracks modules through autograd). Raises InputSizeError when the model
    cannot take such an input.
    """
    shape = tuple(int(v) for v in input_size)
    meta = model if _on_meta(model) else _meta_copy(model)
    was_training = meta.training
    meta.eval()
    try:
        flops = _count_flops(meta, shape)
    finally:
        meta.train(was_training)
    return NetworkCost(parameters=count_parameters(meta), flops_per_sample=flops)


def _on_meta(model: nn.Module) -> bool:
    tensors = [*model.parameters(), *model.buffers()]
    return bool(tensors) and all(t.is_meta for t in tensors)


def _meta_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` whose parameters and buffers are ``meta`` tensors of the same
    shapes: ``deepcopy``'s memo hands out the meta tensor for each real one."""
    import torch
    from torch import nn

    memo: dict[int, Any] = {}
    for param in model.parameters():
        memo[id(param)] = nn.Parameter(
            torch.empty_like(param, device="meta"), requires_grad=param.requires_grad
        )
    for buffer in model.buffers():
        memo[id(buffer)] = torch.empty_like(buffer, device="meta")
    return copy.deepcopy(model, memo)


def _count_flops(model: nn.Module, shape: tuple[int, ...]) -> int:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    try:
        with torch.enable_grad(), counter:
            model(torch.empty((1, *shape), device="meta"))
    except (RuntimeError, ValueError, AssertionError, TypeError, IndexError) as err:
        raise InputSizeError(
            f"the network fails on one input of size {shape} (C, H, W): "
            f"{type(err).__name__}: {err}; set input_size (or img_size) to what it accepts"
        ) from err
    return int(counter.get_total_flops())


def manifest_cost(manifest: Manifest) -> NetworkCost:
    """:func:`network_cost` of ``manifest``'s classifier (NormalizeLayer + network) at its
    ``input_size``, built on the ``meta`` device once per architecture, classes and kwargs, plus
    its denoiser's if it has one (``certbench.nets.denoised``).

    Raises ManifestError / UnknownArchitectureError when the network cannot be built,
    InputSizeError when it cannot take ``input_size``.
    """
    from certbench.nets.denoised import meta_denoiser
    from certbench.nets.meta import meta_key

    cost = _cost(meta_key(manifest), tuple(manifest.input_size))
    denoiser = meta_denoiser(manifest)
    return cost if denoiser is None else network_cost(denoiser, manifest.input_size) + cost


@lru_cache(maxsize=64)
def _cost(key: MetaKey, input_size: tuple[int, ...]) -> NetworkCost:
    from certbench.nets.meta import build_meta

    return network_cost(build_meta(key), input_size)


def parameters_of(manifest: Manifest) -> int:
    """Parameters of ``manifest``'s network (built on ``meta``), without running it: what a
    cap on parameters is checked against before any forward pass is counted."""
    from certbench.nets.denoised import meta_denoiser
    from certbench.nets.meta import meta_classifier

    denoiser = meta_denoiser(manifest)
    extra = 0 if denoiser is None else count_parameters(denoiser)
    return extra + count_parameters(meta_classifier(manifest))
