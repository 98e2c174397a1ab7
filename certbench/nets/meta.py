"""A manifest's classifier built on PyTorch's ``meta`` device: its shapes, without its memory.

Modules built under ``with torch.device("meta")`` hold shape-only tensors: nothing is allocated
and initialisers write nothing, so a network of 10¹² parameters costs what its module objects
cost (a fraction of a second), and intake can judge any declared network (the header's tensors,
``certbench.nets.fit``; its parameters and FLOPs, ``certbench.nets.cost``) before a byte of it
is loaded. One build per architecture, class count, channels and kwargs is kept (an upload is
checked by both), shared read-only: nothing here runs a module in training mode.

torch is imported inside the functions, so importing this module costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

    from certbench.nets.manifest import Manifest

__all__ = ["MetaKey", "build_meta", "meta_classifier", "meta_key"]

#: What determines a manifest's network: architecture, classes, channels, mean/std length and
#: checked kwargs (lists as tuples), hashable for the cache.
MetaKey = tuple[str, int, int, tuple[tuple[str, Any], ...]]


def meta_key(manifest: Manifest) -> MetaKey:
    """The cache key of ``manifest``'s network (its kwargs checked against the allow-list)."""
    from certbench.nets.architectures import check_kwargs

    arch = manifest.architecture
    kwargs = check_kwargs(arch.name, arch.kwargs)
    return arch.name, manifest.num_classes, manifest.input_size[0], _frozen(kwargs)


def _frozen(kwargs: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(
        (key, tuple(value) if isinstance(value, list) else value)
        for key, value in sorted(kwargs.items())
    )


def meta_classifier(manifest: Manifest) -> nn.Module:
    """``nn.Sequential(NormalizeLayer, net)`` of ``manifest`` on the ``meta`` device, in eval mode.

    Raises ManifestError (or UnknownArchitectureError) when the architecture cannot be built with
    the manifest's kwargs.
    """
    return build_meta(meta_key(manifest))


@lru_cache(maxsize=16)
def build_meta(key: MetaKey) -> nn.Module:
    """The classifier of ``key`` (:func:`meta_key`) on the ``meta`` device, built once."""
    import torch

    from certbench.nets.architectures import build_classifier

    name, num_classes, channels, kwargs = key
    with torch.device("meta"):
        model = build_classifier(
            name,
            num_classes=num_classes,
            mean=[0.0] * channels,
            std=[1.0] * channels,
            **dict(kwargs),
        )
    return model.eval()
