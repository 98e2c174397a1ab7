"""Architectures from pinned libraries: ``timm/<model>`` and ``torchvision/<model>``.

RobustBench's model-submission template accepts an architecture "included among robustbench's
architectures or in timm" (RobustBench/robustbench, README "Adding a new model"); certbench does
the same, with the architecture's code coming from the installed, locked library and never from
the upload. :func:`create_library_model` calls

- ``timm.create_model(model, pretrained=False, num_classes=..., in_chans=..., **kwargs)``
  (Wightman, "PyTorch Image Models", github.com/huggingface/pytorch-image-models), or
- ``torchvision.models.get_model(model, weights=None, num_classes=..., **kwargs)``,

so nothing is ever downloaded, with the keyword arguments of the allow-list
(:mod:`certbench.nets.library_kwargs`). The name must be one the library registers: pretrained
tags (``resnet18.a1_in1k``) and Hub names (``hf-hub:...``) select pretrained configurations and
are refused, and an unknown name is answered with the closest registered ones (``difflib``).

The library's version is part of what is certified (:func:`architecture_provenance`): the same
weights under another timm release may be another function.
"""

from __future__ import annotations

import difflib
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from torch import nn

from certbench.errors import ManifestError, UnknownArchitectureError
from certbench.nets.library_kwargs import describe_kwargs, split_library_name

__all__ = [
    "architecture_provenance",
    "check_library_name",
    "create_library_model",
    "library_models",
    "library_version",
]

#: What a library constructor raises for arguments its model does not take or cannot combine
#: (an unexpected keyword, a width not divisible by the heads, a window larger than the image).
_BUILD_ERRORS = (
    TypeError, ValueError, AssertionError, RuntimeError, NotImplementedError, KeyError,
    IndexError, ZeroDivisionError, AttributeError,
)  # fmt: skip


@cache
def library_models(library: str) -> frozenset[str]:
    """The architecture names ``library`` registers (timm: ``timm.list_models()``, untagged;
    torchvision: the classification models of ``torchvision.models.list_models``)."""
    if library == "timm":
        import timm

        return frozenset(timm.list_models())
    if library == "torchvision":
        from torchvision import models

        return frozenset(models.list_models(module=models))
    raise UnknownArchitectureError(f"unknown architecture library {library!r}")


def library_version(library: str) -> str:
    """The installed version of ``library`` (``importlib.metadata``)."""
    try:
        return version(library)
    except PackageNotFoundError as err:
        raise UnknownArchitectureError(
            f"{library} is not installed; run `uv sync` to install the locked version"
        ) from err


def check_library_name(name: str) -> tuple[str, str]:
    """``(library, model)`` of a library architecture name the library registers.

    Raises UnknownArchitectureError: for a pretrained tag or Hub name (they name pretrained
    configurations), and for an unknown model, with the closest registered names.
    """
    parts = split_library_name(name)
    if parts is None:
        raise UnknownArchitectureError(f"{name!r} is not a library architecture (timm/<model>)")
    library, model = parts
    known = library_models(library)
    if model in known:
        return library, model
    base = model.rsplit(":", 1)[-1].rsplit("/", 1)[-1].split(".", 1)[0]
    if base != model and base in known:
        raise UnknownArchitectureError(
            f"architecture {name!r} names a pretrained configuration ({model!r}); certbench "
            f"builds every network without pretrained weights: use {library}/{base}"
        )
    close = difflib.get_close_matches(model, sorted(known), n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(f'{library}/{c}' for c in close)}?" if close else ""
    raise UnknownArchitectureError(
        f"unknown architecture {name!r}: {library} {library_version(library)} registers no "
        f"model {model!r}{hint} (see {_catalogue(library)})"
    )


def _catalogue(library: str) -> str:
    if library == "timm":
        return "timm.list_models()"
    return "torchvision.models.list_models(module=torchvision.models)"


def create_library_model(
    name: str, *, num_classes: int, in_chans: int, kwargs: dict[str, Any]
) -> nn.Module:
    """Build the library architecture ``name``, randomly initialised (the torch generator's
    state), never with pretrained weights. ``kwargs`` must have passed
    :func:`certbench.nets.library_kwargs.check_library_kwargs`.

    Built on whatever device is the default (``with torch.device("meta")``: shapes only).
    Raises ManifestError naming the model and its kwargs when the library refuses them.
    """
    library, model = check_library_name(name)
    try:
        if library == "timm":
            import timm

            return timm.create_model(
                model, pretrained=False, num_classes=num_classes, in_chans=in_chans, **kwargs
            )
        if in_chans != 3:
            raise ManifestError(
                f"torchvision models take 3 input channels; {name!r} cannot take "
                f"input_size[0]={in_chans} (timm models can: in_chans is set from input_size)"
            )
        from torchvision import models

        return models.get_model(model, weights=None, num_classes=num_classes, **kwargs)
    except ManifestError:
        raise
    except _BUILD_ERRORS as err:
        given = f" with {describe_kwargs(kwargs)}" if kwargs else ""
        raise ManifestError(
            f"{library} {library_version(library)} cannot build {model!r}{given}: "
            f"{type(err).__name__}: {err}; check architecture.kwargs"
        ) from err


def architecture_provenance(name: str) -> dict[str, str]:
    """What built the network of architecture ``name``: ``{"name", "library", "version"}``
    (certbench itself for a built-in architecture), recorded with the results."""
    parts = split_library_name(name)
    library = "certbench" if parts is None else parts[0]
    return {"name": name, "library": library, "version": library_version(library)}
