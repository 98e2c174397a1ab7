"""Denoised smoothing entries: a manifest's ``denoiser`` in front of its classifier, one network.

A manifest with a ``denoiser`` block (:data:`certbench.denoising.DenoiserConfig`: a diffusion
denoiser, Carlini et al., ICLR 2023, arXiv:2206.10550; or a DnCNN, Salman et al., NeurIPS 2020,
arXiv:2003.01908) describes the base classifier ``classifier(denoiser(x))``
(:class:`certbench.denoising.DenoisedClassifier`). Its weights are one safetensors file holding
both parts: ``denoiser.*`` (the denoiser's state dict) and ``classifier.*`` (the classifier's, as
a plain submission's file holds it, with or without the ``1.`` of ``nn.Sequential(NormalizeLayer,
net)``), which is what ``certbench.nets.save_weights(DenoisedClassifier(...))`` writes.

The functions here are the hooks by which the rest of ``certbench.nets`` treats such a manifest
like any other: :func:`certbench.nets.load_model` builds the composition (so every stage, the
CLI and the zoo certify ``classifier ∘ denoiser``), ``certbench.nets.fit`` checks a header's two
parts against the networks built on the ``meta`` device, and ``certbench.nets.cost`` adds the
parameters and FLOPs of :func:`meta_denoiser` to the classifier's. Without a denoiser each is a
no-op.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

from certbench.errors import StateDictMismatchError

if TYPE_CHECKING:
    import torch
    from torch import nn

    from certbench.denoising import DiffusionDenoiserConfig, DnCNNConfig
    from certbench.nets.manifest import Manifest

    Config = DiffusionDenoiserConfig | DnCNNConfig

__all__ = [
    "check_denoiser_fit",
    "denoiser_provenance",
    "denoiser_tensor_count",
    "meta_denoiser",
    "split_denoised",
    "with_denoiser",
]

T = TypeVar("T")


def split_denoised(
    tensors: Mapping[str, T], manifest: Manifest
) -> tuple[dict[str, T] | None, dict[str, T]]:
    """(denoiser part, classifier part) of a denoised submission's tensors, prefixes removed;
    ``(None, tensors)`` for a plain manifest. Raises StateDictMismatchError when a key has
    neither prefix or a part is missing, or when a plain manifest comes with exactly the two
    parts of a denoised file (the manifest's denoiser block forgotten)."""
    from certbench.denoising import CLASSIFIER_PREFIX, DENOISER_PREFIX

    if manifest.denoiser is None:
        if {key.split(".", 1)[0] + "." for key in tensors} == {DENOISER_PREFIX, CLASSIFIER_PREFIX}:
            raise StateDictMismatchError(
                f"the weights hold {DENOISER_PREFIX}* and {CLASSIFIER_PREFIX}* tensors (a "
                "denoised submission) but the manifest has no denoiser; add its denoiser block"
            )
        return None, dict(tensors)
    from certbench.denoising import split_weights

    return split_weights(tensors)


def with_denoiser(
    classifier: nn.Module, tensors: Mapping[str, torch.Tensor] | None, manifest: Manifest
) -> nn.Module:
    """``DenoisedClassifier(denoiser, classifier)`` with the manifest's denoiser loaded strictly
    from ``tensors`` (σ and image size the manifest's), or ``classifier`` for a plain manifest."""
    if manifest.denoiser is None or tensors is None:
        return classifier
    from certbench.denoising import DenoisedClassifier, load_denoiser

    denoiser = load_denoiser(
        tensors, manifest.denoiser, sigma=manifest.smoothing.sigma, input_size=manifest.input_size
    )
    return DenoisedClassifier(denoiser, classifier)


def _expected(manifest: Manifest) -> dict[str, tuple[int, ...]]:
    from certbench.denoising import denoiser_shapes

    assert manifest.denoiser is not None
    return denoiser_shapes(
        manifest.denoiser, sigma=manifest.smoothing.sigma, input_size=manifest.input_size
    )


def denoiser_provenance(manifest: Mapping[str, Any]) -> dict[str, str] | None:
    """What built a manifest's denoiser (a manifest as stored, a JSON object), recorded with the
    results beside the classifier's ``architecture``: ``{"kind", "library", "version"}``
    (``diffusers`` for a U-Net, certbench for its DnCNN); None without a denoiser."""
    block = manifest.get("denoiser")
    if not isinstance(block, Mapping):
        return None
    from certbench.nets.libraries import library_version

    kind = str(block.get("kind"))
    library = "diffusers" if kind == "diffusion" else "certbench"
    return {"kind": kind, "library": library, "version": library_version(library)}


def denoiser_tensor_count(manifest: Manifest) -> int:
    """Tensors of the manifest's denoiser (0 without one), counted on the ``meta`` device."""
    return 0 if manifest.denoiser is None else len(_expected(manifest))


def check_denoiser_fit(
    shapes: Mapping[str, tuple[int, ...]], manifest: Manifest
) -> Mapping[str, tuple[int, ...]]:
    """Check the ``denoiser.*`` names and shapes of a header against the manifest's denoiser
    (built on ``meta``) and return the classifier part, prefix removed, for the classifier's own
    check; a plain manifest's ``shapes`` are returned as they are. Raises
    StateDictMismatchError with a one-line summary."""
    denoiser, classifier = split_denoised(shapes, manifest)
    if denoiser is None:
        return classifier
    from certbench.denoising import DENOISER_PREFIX

    expected = {k.removeprefix(DENOISER_PREFIX): v for k, v in _expected(manifest).items()}
    required = {k for k in expected if not k.endswith("num_batches_tracked")}
    missing, unexpected = sorted(required - set(denoiser)), sorted(set(denoiser) - set(expected))
    kind = manifest.denoiser.kind if manifest.denoiser is not None else ""
    if missing or unexpected:
        example = f"missing {missing[0]!r}" if missing else f"unexpected {unexpected[0]!r}"
        raise StateDictMismatchError(
            f"the weights' {DENOISER_PREFIX}* tensors do not fit the manifest's {kind} "
            f"denoiser: {len(denoiser)} tensors, {len(required)} expected ({len(missing)} "
            f"missing, {len(unexpected)} unexpected, e.g. {example}); check the manifest's "
            "denoiser block"
        )
    wrong = sorted(k for k in denoiser if tuple(denoiser[k]) != expected[k])
    if wrong:
        first = wrong[0]
        raise StateDictMismatchError(
            f"{len(wrong)} of the weights' {DENOISER_PREFIX}* tensors have other shapes than "
            f"the manifest's {kind} denoiser, e.g. {DENOISER_PREFIX}{first}: weights "
            f"{tuple(denoiser[first])} vs expected {expected[first]}; check the denoiser block"
        )
    return classifier


def meta_denoiser(manifest: Manifest) -> nn.Module | None:
    """The manifest's denoiser on the ``meta`` device, in eval mode (None without one): built
    once per configuration, σ and image size and shared read-only, like ``certbench.nets.meta``'s
    classifiers; ``certbench.nets.cost`` counts its parameters and FLOPs."""
    if manifest.denoiser is None:
        return None
    return _meta_denoiser(manifest.denoiser, manifest.smoothing.sigma, manifest.input_size)


@lru_cache(maxsize=8)
def _meta_denoiser(config: Config, sigma: float, input_size: tuple[int, ...]) -> nn.Module:
    import torch

    from certbench.denoising import build_denoiser

    with torch.device("meta"):
        return build_denoiser(config, sigma=sigma, input_size=input_size).eval()
