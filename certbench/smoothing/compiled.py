"""The engine's torch.compile'd forward, and what happens when torch.compile fails on a model.

``certify``/``predict`` compile the base classifier when a call is long enough to repay it
(``certbench.smoothing.defaults``), or when the caller asks. torch.compile compiles lazily, at the
first forward, and some models cannot be compiled: dynamo raises from inside its tracer (a forward
whose traced program differs from the eager one, a Python side effect it cannot replay), or
inductor fails to generate code. Such an error says nothing about the model's predictions, which
the eager forward gives exactly as well (compiled and eager forwards agree outside near ties,
which the eager model settles anyway: ``certbench.smoothing.sampling``).

So the first forward that fails compiled is run eagerly on the same batch:

- if the eager forward fails too, its error is the model's own and is raised as is;
- if the caller did not ask for compile (``compile=None``), the engine warns once
  (:class:`CompileFallbackWarning`), keeps the eager forward for this model from then on (later
  calls do not retry), and :func:`compile_fallback` returns the reason, for callers that store
  records to write into their metadata;
- if the caller asked for it (``compile=True``), a :class:`~certbench.errors.CertificationError`
  says that torch.compile cannot compile this model and to pass ``compile=False``.
"""

from __future__ import annotations

import warnings
import weakref
from typing import cast

import torch
from torch import nn

from certbench.errors import CertificationError

__all__ = [
    "CompileFallbackWarning",
    "compile_fallback",
    "compiled_forward",
    "fallback_metadata",
    "is_compiled",
]


class CompileFallbackWarning(UserWarning):
    """torch.compile failed on a model the engine chose to compile; it runs eagerly instead."""


_COMPILED: weakref.WeakKeyDictionary[nn.Module, tuple[tuple, nn.Module]] = (
    weakref.WeakKeyDictionary()
)
"""One compiled graph per model and weights version, reused by every certify call."""

_FAILED: weakref.WeakKeyDictionary[nn.Module, str] = weakref.WeakKeyDictionary()
"""Models torch.compile failed on in this process → why (the first line of the error)."""


def is_compiled(model: nn.Module) -> bool:
    """Whether ``model`` has a compiled graph in this process (a later call reuses it)."""
    return model in _COMPILED


def compile_fallback(model: nn.Module) -> str | None:
    """Why torch.compile was abandoned for ``model`` in this process and its forward runs
    eagerly (None: it never failed). Callers that store records write it into their metadata."""
    return _FAILED.get(model)


def fallback_metadata(model: nn.Module) -> dict[str, str]:
    """``{"compile_fallback": reason}`` when torch.compile failed on ``model`` and it ran
    eagerly, else empty: what a caller adds to the metadata of the records it writes."""
    reason = compile_fallback(model)
    return {} if reason is None else {"compile_fallback": reason}


def compiled_forward(
    model: nn.Module, eager: nn.Module, version: tuple, *, requested: bool
) -> nn.Module:
    """The forward the engine runs for batches: ``model`` compiled (cached per weights
    ``version``) behind a guard that falls back to ``eager`` when compiling fails; ``eager``
    itself when compiling failed before and the caller did not ask for it (``requested``)."""
    if model in _FAILED and not requested:
        return eager
    compiled = _COMPILED.get(model)
    if compiled is None or compiled[0] != version:
        # freezing treats the weights as constants: BatchNorm folds into the convolutions and
        # the weights are pre-packed; valid because the base classifier is fixed while certifying
        graph = torch.compile(model, dynamic=False, options={"freezing": True})
        compiled = (version, cast(nn.Module, graph))
        _COMPILED[model] = compiled
    return _GuardedForward(model, compiled[1], eager, requested)


class _GuardedForward(nn.Module):
    """The compiled graph until it fails on a batch its eager twin classifies; then eager."""

    _model: weakref.ref[nn.Module]
    _graph: nn.Module
    _eager: nn.Module

    def __init__(
        self, model: nn.Module, graph: nn.Module, eager: nn.Module, requested: bool
    ) -> None:
        super().__init__()
        # plain attributes, not submodules: this wrapper owns no weights of its own
        object.__setattr__(self, "_model", weakref.ref(model))
        object.__setattr__(self, "_graph", graph)
        object.__setattr__(self, "_eager", eager)
        self.requested = requested
        self.failed = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.failed:
            return cast(torch.Tensor, self._eager(x))
        try:
            return cast(torch.Tensor, self._graph(x))
        except Exception as compile_error:  # judged below: the eager forward decides
            logits = cast(torch.Tensor, self._eager(x))  # its own error, if any, is the model's
            self._fall_back(compile_error)
            return logits

    def _fall_back(self, error: Exception) -> None:
        reason = _reason(error)
        if self.requested:
            raise CertificationError(
                f"torch.compile cannot compile this model ({reason}); its eager forward works: "
                "certify without compile (compile=False, or --no-compile)"
            ) from error
        self.failed = True
        model = self._model()
        if model is not None:
            _COMPILED.pop(model, None)
            _FAILED[model] = reason
        warnings.warn(
            f"torch.compile failed on this model ({reason}); certifying with the eager "
            "forward instead (same counts; the records' metadata says so)",
            CompileFallbackWarning,
            stacklevel=2,
        )


def _reason(error: Exception) -> str:
    """The error's type and first line: enough to recognise it, short enough for metadata."""
    first = next((line.strip() for line in str(error).splitlines() if line.strip()), "")
    return f"{type(error).__name__}: {first}"[:300]
