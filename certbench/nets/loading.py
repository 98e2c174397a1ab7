"""Safe loading of submitted models: a JSON manifest, a registry architecture, safetensors weights.

The manifest itself is :mod:`certbench.nets.manifest` (torch-free; its names are re-exported here).

User uploads are data, never code. Weights are read with ``safetensors`` only (never ``torch.load``,
pickle or TorchScript), the network is built from the registry by name with allow-listed kwargs,
loaded with ``strict=True`` and then exercised by a dummy forward pass, so every mistake a submitter
can make surfaces here as a :class:`~certbench.errors.ModelLoadError` subclass naming the fix.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import load_file, save_file
from torch import nn

from certbench.errors import (
    InputSizeError,
    ModelOutputError,
    NonFiniteOutputError,
    NonFiniteWeightsError,
    StateDictMismatchError,
    WeightsFormatError,
)
from certbench.nets.architectures import build_classifier
from certbench.nets.denoised import split_denoised, with_denoiser
from certbench.nets.fit import expected_tensor_count, max_tensors, with_prefix
from certbench.nets.header import read_header
from certbench.nets.manifest import (
    MAX_CHANNELS,
    MAX_INPUT_SIDE,
    NAME_LENGTH,
    Architecture,
    Manifest,
    Metadata,
    Preprocessing,
    Smoothing,
    load_manifest,
)

__all__ = [
    "MAX_CHANNELS",
    "MAX_INPUT_SIDE",
    "NAME_LENGTH",
    "Architecture",
    "Manifest",
    "Metadata",
    "Preprocessing",
    "Smoothing",
    "check_finite",
    "check_model",
    "expected_tensor_count",
    "load_manifest",
    "load_model",
    "max_tensors",
    "read_safetensors",
    "save_weights",
]


def read_safetensors(
    src: Path | str | bytes, *, max_bytes: int | None = None, max_tensors: int | None = None
) -> dict[str, torch.Tensor]:
    """Read a safetensors file or buffer into CPU tensors, refusing anything else.

    The header is read and checked first (``certbench.nets.header.read_header``, bounded
    by ``max_tensors`` before it is parsed); only then does ``safetensors`` load the data.
    Floating tensors only, except integer BatchNorm ``num_batches_tracked`` counters, so a weight
    is never silently cast from ints. Raises WeightsFormatError.
    """
    size = len(src) if isinstance(src, bytes) else _file_size(Path(src))
    if max_bytes is not None and size > max_bytes:
        raise WeightsFormatError(
            f"weights are {size} bytes, above the limit of {max_bytes} bytes; "
            "submit a smaller model or store it in fp16/bf16"
        )
    read_header(src, max_tensors=max_tensors)
    try:
        if isinstance(src, bytes):
            tensors = load_safetensors_bytes(src)
        else:
            tensors = load_file(str(src), device="cpu")
    except (SafetensorError, ValueError, OSError) as err:
        raise WeightsFormatError(
            f"weights are not a valid safetensors file ({err}); save them with "
            "certbench.nets.loading.save_weights or safetensors.torch.save_file"
        ) from err
    _check_dtypes(tensors)
    return tensors


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError as err:
        raise WeightsFormatError(f"cannot read weights file {str(path)!r}: {err.strerror}") from err


def _check_dtypes(tensors: Mapping[str, torch.Tensor]) -> None:
    for key, tensor in tensors.items():
        counter = key.endswith("num_batches_tracked") and not tensor.is_floating_point()
        if not tensor.is_floating_point() and not counter:
            raise WeightsFormatError(
                f"tensor {key!r} has dtype {tensor.dtype}; weights must be floating point"
            )


def check_finite(tensors: Mapping[str, torch.Tensor]) -> None:
    """Raise NonFiniteWeightsError naming every tensor that holds NaN or ±inf (a NaN weight makes
    every output NaN, so certification would count garbage; the safetensors header cannot tell,
    only the values can)."""
    found = []
    for key, tensor in tensors.items():
        if not tensor.is_floating_point():
            continue
        finite = torch.isfinite(tensor)
        if bool(finite.all()):
            continue
        nan = int(torch.isnan(tensor).sum())
        inf = tensor.numel() - int(finite.sum()) - nan
        kinds = ", ".join(f"{count:,} {kind}" for count, kind in ((nan, "NaN"), (inf, "±inf"))
                          if count)  # fmt: skip
        found.append(f"{key} ({kinds} of {tensor.numel():,} values)")
    if found:
        raise NonFiniteWeightsError(
            f"weights hold values that are not finite: {_few(found)}; every output of the "
            "network would be NaN or infinite. Check the training run (a diverged loss leaves "
            "NaN weights) and submit weights whose values are all finite"
        )


def load_model(
    weights: Path | str | bytes,
    manifest: Manifest,
    *,
    device: torch.device | str | None = None,
    max_bytes: int | None = None,
) -> nn.Module:
    """Build the manifest's classifier, load ``weights`` strictly, check it, return it in eval mode.

    Keys may carry the ``1.`` prefix of ``nn.Sequential(NormalizeLayer, net)`` (Cohen et al.'s
    checkpoints, :func:`save_weights`) or be the bare network's keys (``conv1.weight``); a file must
    use one layout throughout. A manifest with a ``denoiser`` gives
    ``DenoisedClassifier(denoiser, classifier)`` from one file of ``denoiser.*`` and
    ``classifier.*`` tensors (``certbench.nets.denoised``). Raises the ModelLoadError subclasses
    of its steps.
    """
    tensors = read_safetensors(weights, max_bytes=max_bytes, max_tensors=max_tensors(manifest))
    check_finite(tensors)
    denoiser, tensors = split_denoised(tensors, manifest)  # (None, tensors) without a denoiser
    arch = manifest.architecture
    model: nn.Module = build_classifier(
        arch.name,
        num_classes=manifest.num_classes,
        mean=manifest.preprocessing.mean,
        std=manifest.preprocessing.std,
        **arch.kwargs,
    )
    state = with_prefix(tensors)
    _check_state_dict(model, state, arch.name)
    model.load_state_dict(state, strict=True)
    model = with_denoiser(model, denoiser, manifest)  # denoiser · classifier, or the classifier
    model.to(device or "cpu").eval()
    check_model(model, manifest, device=device)
    return model


def _check_state_dict(model: nn.Module, state: Mapping[str, torch.Tensor], arch: str) -> None:
    """Compare keys and shapes first, so the error lists every problem at once."""
    expected = model.state_dict()
    # BatchNorm fills in absent counters itself (checkpoints from older PyTorch lack them).
    missing = sorted(k for k in set(expected) - set(state) if not k.endswith("num_batches_tracked"))
    unexpected = sorted(set(state) - set(expected))
    shapes = sorted(
        f"{k}: weights {tuple(state[k].shape)} vs model {tuple(expected[k].shape)}"
        for k in set(state) & set(expected)
        if state[k].shape != expected[k].shape
    )
    problems = []
    if missing:
        problems.append(f"missing keys ({len(missing)}): {_few(missing)}")
    if unexpected:
        problems.append(f"unexpected keys ({len(unexpected)}): {_few(unexpected)}")
    if shapes:
        problems.append(f"shape mismatches ({len(shapes)}): {_few(shapes)}")
    if problems:
        raise StateDictMismatchError(
            f"weights do not fit architecture {arch!r}: "
            + "; ".join(problems)
            + ". Check the manifest's architecture, kwargs and num_classes."
        )


def _few(items: list[str], limit: int = 8) -> str:
    more = f", ... (+{len(items) - limit} more)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


@torch.no_grad()
def check_model(
    model: nn.Module,
    manifest: Manifest,
    *,
    device: torch.device | str | None = None,
    batch: int = 2,
) -> None:
    """Dummy forward of ``batch`` inputs in [0,1] of ``manifest.input_size``; leaves eval mode.

    Raises InputSizeError if the model cannot take that size, ModelOutputError if the output is
    not (batch, num_classes) or not finite.
    """
    model.eval()
    generator = torch.Generator().manual_seed(0)
    x = torch.rand((batch, *manifest.input_size), generator=generator).to(device or "cpu")
    try:
        out = model(x)
    except (RuntimeError, ValueError) as err:
        raise InputSizeError(
            f"model fails on inputs of input_size {tuple(manifest.input_size)}: {err}. "
            "Set the manifest's input_size to what the architecture accepts"
        ) from err
    expected = (batch, manifest.num_classes)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != expected:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ModelOutputError(
            f"model output has shape {got}, expected {expected} (batch, num_classes); "
            "check the manifest's num_classes"
        )
    if not torch.isfinite(out).all():
        raise NonFiniteOutputError(
            "model outputs are not finite (NaN or inf) on inputs in [0,1]; check the weights"
        )


def save_weights(model: nn.Module, path: Path | str) -> None:
    """Write ``model.state_dict()`` as safetensors (atomic), the inverse of :func:`load_model`."""
    path = Path(path)
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        save_file(tensors, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
