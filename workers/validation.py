"""The validate step: is a stored upload a model we can certify?

Safe-loads the weights with ``certbench.nets.loading.load_model`` (safetensors only, registry
architecture, every weight finite, strict state dict, one dummy forward), then forwards a dummy
batch the way CERTIFY will: noisy inputs at the submission's sigma, unclamped. A model that is
finite on clean images but NaN under noise would otherwise fail hours later, in the middle of a
shard. Every problem becomes a ``Rejection`` with a machine-readable reason from
``models.db.states.Reason``: NaN or infinite weights are ``non_finite_weights`` (the values are
read here; intake reads only the header), finite weights whose outputs are not finite
``non_finite_output``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from certbench.errors import (
    DuplicateTensorError,
    InputSizeError,
    ManifestError,
    ModelLoadError,
    ModelOutputError,
    NonFiniteOutputError,
    NonFiniteWeightsError,
    PreprocessingError,
    StateDictMismatchError,
    UnknownArchitectureError,
    WeightsFormatError,
)
from certbench.nets import Manifest, load_manifest, load_model
from certbench.smoothing import derive_seed, seeded_generator
from models.db.states import Reason
from models.stages.work import WorkItem

DUMMY_BATCH = 8
"""Images in the validation batch: enough to catch batch-dependent failures, cheap on any device."""

_REASONS: tuple[tuple[type[ModelLoadError], Reason], ...] = (
    (NonFiniteWeightsError, Reason.NON_FINITE_WEIGHTS),
    (DuplicateTensorError, Reason.DUPLICATE_TENSOR),
    (PreprocessingError, Reason.BAD_PREPROCESSING),
    (UnknownArchitectureError, Reason.UNKNOWN_ARCHITECTURE),
    (ManifestError, Reason.BAD_MANIFEST),
    (WeightsFormatError, Reason.NOT_SAFETENSORS),
    (StateDictMismatchError, Reason.STATE_DICT_MISMATCH),
    (InputSizeError, Reason.INPUT_SIZE),
)


@dataclass(frozen=True)
class Rejection:
    """Why an upload cannot be certified: a Reason code and the message shown to the submitter."""

    reason: Reason
    message: str


def validate_model(item: WorkItem, *, device: torch.device | str) -> Rejection | None:
    """None if ``item``'s model can be certified on its benchmark, else the Rejection.

    The caller guarantees ``item.weights_path`` exists (a missing file is an infrastructure
    failure, not the submitter's fault).
    """
    if item.weights_path is None:
        raise ValueError("validate_model needs a stored weights file (item.weights_path is None)")
    try:
        manifest = load_manifest(item.manifest)
    except ModelLoadError as err:  # ManifestError, or UnknownArchitectureError for the name
        return Rejection(_reason_of(err), str(err))
    mismatch = _benchmark_mismatch(item, manifest)
    if mismatch is not None:
        return mismatch
    try:
        model = load_model(item.weights_path, manifest, device=device)
    except ModelLoadError as err:
        return Rejection(_reason_of(err), str(err))
    return _check_noisy_batch(model, item, manifest, device=torch.device(device))


def _benchmark_mismatch(item: WorkItem, manifest: Manifest) -> Rejection | None:
    """The manifest must describe a classifier for this benchmark's label space."""
    if manifest.num_classes != item.num_classes:
        return Rejection(
            Reason.BENCHMARK_MISMATCH,
            f"manifest num_classes={manifest.num_classes} but benchmark {item.benchmark!r} has "
            f"{item.num_classes} classes; submit a model with {item.num_classes} outputs",
        )
    return None


def _reason_of(err: ModelLoadError) -> Reason:
    if isinstance(err, NonFiniteOutputError):
        return Reason.NON_FINITE_OUTPUT
    if isinstance(err, ModelOutputError):
        return Reason.BAD_OUTPUT
    for cls, reason in _REASONS:
        if isinstance(err, cls):
            return reason
    return Reason.BAD_MANIFEST


@torch.no_grad()
def _check_noisy_batch(
    model: nn.Module, item: WorkItem, manifest: Manifest, *, device: torch.device
) -> Rejection | None:
    """Forward DUMMY_BATCH seeded images plus N(0, sigma²) noise, as CERTIFY does."""
    generator = seeded_generator(derive_seed(item.seed, "validate"))
    shape = (DUMMY_BATCH, *manifest.input_size)
    clean = torch.rand(shape, generator=generator)
    noisy = clean + item.sigma * torch.randn(shape, generator=generator)
    try:
        logits = model(noisy.to(device))
    except (RuntimeError, ValueError) as err:
        return Rejection(
            Reason.INPUT_SIZE,
            f"model fails on a batch of {DUMMY_BATCH} noisy inputs of size "
            f"{tuple(manifest.input_size)}: {err}",
        )
    expected = (DUMMY_BATCH, item.num_classes)
    if tuple(logits.shape) != expected:
        return Rejection(
            Reason.BAD_OUTPUT,
            f"model output has shape {tuple(logits.shape)} on a batch of {DUMMY_BATCH}, expected "
            f"{expected} (batch, num_classes); the model must return one logit per class",
        )
    if not torch.isfinite(logits).all():
        bad = int((~torch.isfinite(logits)).any(dim=1).sum())
        return Rejection(
            Reason.NON_FINITE_OUTPUT,
            f"model outputs are NaN or infinite for {bad} of {DUMMY_BATCH} noisy inputs "
            f"(sigma={item.sigma}); certification adds this noise, so fix the weights",
        )
    return None
