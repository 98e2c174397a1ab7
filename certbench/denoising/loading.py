"""A denoised submission from data: one safetensors file, a manifest and a denoiser configuration.

The file holds both parts' tensors, ``denoiser.*`` and ``classifier.*`` (the state dict of
:class:`~certbench.denoising.composed.DenoisedClassifier`, as :func:`certbench.nets.save_weights`
writes it). Nothing is unpickled: the header is read and bounded first
(:func:`certbench.nets.read_header`), the classifier part is loaded by
:func:`certbench.nets.load_model` exactly as a plain submission (with all its checks), the
denoiser is built from its allow-listed configuration and loaded strictly, and the composition is
exercised once on inputs in [0, 1].
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import save as save_safetensors_bytes
from torch import nn

from certbench.denoising.composed import (
    CLASSIFIER_PREFIX,
    DENOISER_PREFIX,
    DenoisedClassifier,
    build_denoiser,
)
from certbench.denoising.config import DiffusionDenoiserConfig, DnCNNConfig
from certbench.errors import (
    ModelOutputError,
    StateDictMismatchError,
    WeightsFormatError,
)
from certbench.nets import Manifest, load_model, max_tensors, read_header

__all__ = ["denoiser_shapes", "load_denoised_classifier", "load_denoiser", "split_weights"]

Config = DiffusionDenoiserConfig | DnCNNConfig


def denoiser_shapes(
    config: Config, *, sigma: float, input_size: Sequence[int]
) -> dict[str, tuple[int, ...]]:
    """Names (with the ``denoiser.`` prefix) and shapes of the denoiser's tensors, built on the
    ``meta`` device: no parameter memory, so an intake check costs the same whatever the size."""
    with torch.device("meta"):
        module = build_denoiser(config, sigma=sigma, input_size=input_size)
    return {DENOISER_PREFIX + key: tuple(t.shape) for key, t in module.state_dict().items()}


def split_weights(
    tensors: Mapping[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(denoiser tensors, classifier tensors), prefixes removed; StateDictMismatchError when a
    key has neither prefix or a part is missing."""
    stray = sorted(k for k in tensors if not k.startswith((DENOISER_PREFIX, CLASSIFIER_PREFIX)))
    if stray:
        raise StateDictMismatchError(
            f"a denoised submission's tensors start with {DENOISER_PREFIX!r} or "
            f"{CLASSIFIER_PREFIX!r}; {len(stray)} do not, e.g. {stray[0]!r}"
        )
    parts: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]] = ({}, {})
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


def load_denoised_classifier(
    weights: Path | str | bytes,
    manifest: Manifest,
    config: Config,
    *,
    device: torch.device | str | None = None,
    max_bytes: int | None = None,
) -> DenoisedClassifier:
    """``DenoisedClassifier(denoiser, classifier)`` of a denoised submission, in eval mode on
    ``device``; σ and the image size are the manifest's. Raises the ModelLoadError subclasses
    of its steps (format, key and shape mismatches, output checks)."""
    data = weights if isinstance(weights, bytes) else _read(Path(weights), max_bytes)
    if max_bytes is not None and len(data) > max_bytes:
        raise WeightsFormatError(
            f"weights are {len(data)} bytes, above the limit of {max_bytes} bytes"
        )
    sigma, size = manifest.smoothing.sigma, manifest.input_size
    expected = len(denoiser_shapes(config, sigma=sigma, input_size=size))
    read_header(data, max_tensors=max_tensors(manifest) + 2 * expected)
    try:
        tensors = load_safetensors_bytes(data)
    except (SafetensorError, ValueError) as err:
        raise WeightsFormatError(f"weights are not a valid safetensors file ({err})") from err
    for key, tensor in tensors.items():
        if not tensor.is_floating_point() and not key.endswith("num_batches_tracked"):
            raise WeightsFormatError(
                f"tensor {key!r} has dtype {tensor.dtype}; weights must be floating point"
            )
    denoiser_tensors, classifier_tensors = split_weights(tensors)
    classifier = load_model(save_safetensors_bytes(classifier_tensors), manifest, device=device)
    denoiser = load_denoiser(denoiser_tensors, config, sigma=sigma, input_size=size)
    model = DenoisedClassifier(denoiser, classifier).to(device or "cpu").eval()
    _check_outputs(model, manifest)
    return model


def _read(path: Path, max_bytes: int | None) -> bytes:
    try:
        if max_bytes is not None and path.stat().st_size > max_bytes:
            raise WeightsFormatError(
                f"weights are {path.stat().st_size} bytes, above the limit of {max_bytes} bytes"
            )
        return path.read_bytes()
    except OSError as err:
        raise WeightsFormatError(f"cannot read weights file {str(path)!r}: {err.strerror}") from err


@torch.no_grad()
def _check_outputs(model: nn.Module, manifest: Manifest, batch: int = 2) -> None:
    """One forward of inputs in [0, 1]: logits of (batch, num_classes), all finite."""
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(0)
    x = torch.rand((batch, *manifest.input_size), generator=generator).to(device)
    out = model(x)
    if tuple(out.shape) != (batch, manifest.num_classes) or not torch.isfinite(out).all():
        raise ModelOutputError(
            f"the denoised classifier returns {tuple(out.shape)} outputs"
            f"{'' if torch.isfinite(out).all() else ' with NaN or inf'} on inputs in [0, 1]; "
            f"expected finite logits of shape {(batch, manifest.num_classes)}"
        )
