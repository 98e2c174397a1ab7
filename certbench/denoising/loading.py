"""A denoiser from data: its allow-listed configuration and safetensors tensors, never pickle.

A denoised submission's one safetensors file holds both parts' tensors, ``denoiser.*`` and
``classifier.*`` (the state dict of :class:`~certbench.denoising.composed.DenoisedClassifier`,
as ``certbench.nets.save_weights`` writes it). :func:`split_weights` separates them,
:func:`load_denoiser` builds the configured denoiser and loads its part strictly, and
:func:`denoiser_shapes` lists the names and shapes a file must hold for it, built on the
``meta`` device. The classifier part is the manifest's, loaded by ``certbench.nets.load_model``
with every check of a plain submission (``certbench.nets.denoised`` composes the two).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TypeVar

import torch
from torch import nn

from certbench.denoising.composed import CLASSIFIER_PREFIX, DENOISER_PREFIX, build_denoiser
from certbench.denoising.config import DiffusionDenoiserConfig, DnCNNConfig
from certbench.errors import StateDictMismatchError

__all__ = ["denoiser_shapes", "load_denoiser", "split_weights"]

Config = DiffusionDenoiserConfig | DnCNNConfig
T = TypeVar("T")


def denoiser_shapes(
    config: Config, *, sigma: float, input_size: Sequence[int]
) -> dict[str, tuple[int, ...]]:
    """Names (with the ``denoiser.`` prefix) and shapes of the denoiser's tensors, built on the
    ``meta`` device: no parameter memory, so an intake check costs the same whatever the size.
    Raises DenoiserConfigError when the configuration does not fit the images or σ."""
    return dict(_shapes(config, float(sigma), tuple(int(v) for v in input_size)))


@lru_cache(maxsize=32)
def _shapes(
    config: Config, sigma: float, input_size: tuple[int, ...]
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    with torch.device("meta"):
        module = build_denoiser(config, sigma=sigma, input_size=input_size)
    return tuple((DENOISER_PREFIX + key, tuple(t.shape)) for key, t in module.state_dict().items())


def split_weights(tensors: Mapping[str, T]) -> tuple[dict[str, T], dict[str, T]]:
    """(denoiser part, classifier part) of a denoised submission's tensors (or of its header's
    names), prefixes removed; StateDictMismatchError when a key has neither prefix or a part is
    missing."""
    stray = sorted(k for k in tensors if not k.startswith((DENOISER_PREFIX, CLASSIFIER_PREFIX)))
    if stray:
        raise StateDictMismatchError(
            f"a denoised submission's tensors start with {DENOISER_PREFIX!r} or "
            f"{CLASSIFIER_PREFIX!r}; {len(stray)} do not, e.g. {stray[0]!r}"
        )
    parts: tuple[dict[str, T], dict[str, T]] = ({}, {})
    for key, value in tensors.items():
        denoiser = key.startswith(DENOISER_PREFIX)
        prefix = DENOISER_PREFIX if denoiser else CLASSIFIER_PREFIX
        parts[0 if denoiser else 1][key[len(prefix) :]] = value
    for part, prefix in zip(parts, (DENOISER_PREFIX, CLASSIFIER_PREFIX), strict=True):
        if not part:
            raise StateDictMismatchError(f"the weights hold no {prefix!r} tensors")
    return parts


def load_denoiser(
    tensors: Mapping[str, torch.Tensor], config: Config, *, sigma: float, input_size: Sequence[int]
) -> nn.Module:
    """The configured denoiser with ``tensors`` (no prefix) loaded strictly, in eval mode."""
    module = build_denoiser(config, sigma=sigma, input_size=input_size)
    expected = module.state_dict()
    missing = sorted(k for k in set(expected) - set(tensors) if not k.endswith("batches_tracked"))
    unexpected = sorted(set(tensors) - set(expected))
    shapes = sorted(
        f"{k}: weights {tuple(tensors[k].shape)} vs denoiser {tuple(expected[k].shape)}"
        for k in set(tensors) & set(expected)
        if tensors[k].shape != expected[k].shape
    )
    if missing or unexpected or shapes:
        problems = [
            f"{label} ({len(items)}): {', '.join(items[:4])}"
            for label, items in (
                ("missing", missing),
                ("unexpected", unexpected),
                ("shape mismatches", shapes),
            )
            if items
        ]
        raise StateDictMismatchError(
            f"denoiser weights do not fit the {config.kind} configuration: " + "; ".join(problems)
        )
    module.load_state_dict(dict(tensors), strict=False)  # counters may be absent (checked above)
    return module.eval()
