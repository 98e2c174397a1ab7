"""torch.compile failures inside ``certify`` (issue 35 §6): a model torch.compile cannot compile
(its traced program breaks where its eager forward works) is certified eagerly, with one
warning and the reason recorded for the records' metadata, when the engine chose to compile
(a call of ≥ AUTO_COMPILE_SAMPLES samples); a caller who asked for compile gets a
CertificationError saying so. Before, dynamo's own exception escaped ``certify``.

The failure happens in dynamo's tracer, before inductor generates code (under a second on its
own); the first torch.compile of a process still pays inductor's start-up."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from certbench.errors import CertificationError
from certbench.smoothing import (
    CompileFallbackWarning,
    certify,
    compile_fallback,
    fallback_metadata,
    read_metadata,
    write_records,
)
from certbench.smoothing.defaults import AUTO_COMPILE_SAMPLES


class Untraceable(nn.Module):
    """A linear classifier whose forward takes another path under torch.compile, where it adds
    a tensor of the wrong shape: dynamo's fake-tensor run fails, the eager forward never does."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(12, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.linear(x.flatten(1))
        if torch.compiler.is_compiling():
            logits = logits + torch.zeros(5)
        return logits


def twin() -> Untraceable:
    torch.manual_seed(0)
    return Untraceable()


def counts(records: list) -> list[tuple[int, int, int, int]]:
    return [(r.n_a, r.n_y, r.n, r.prediction) for r in records]


IMAGE = torch.full((1, 3, 2, 2), 0.5)
N = AUTO_COMPILE_SAMPLES  # one image of n0 + n samples is past the threshold: auto-compiles


@pytest.mark.slow
def test_auto_compile_falls_back_to_eager_once_and_says_so(tmp_path):
    model = twin()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = certify(model, IMAGE, [0], sigma=0.5, n0=100, n=N)
        again = certify(model, IMAGE, [0], sigma=0.5, n0=100, n=N)
    fallbacks = [w for w in caught if issubclass(w.category, CompileFallbackWarning)]
    assert len(fallbacks) == 1 and "certifying with the eager forward" in str(fallbacks[0].message)
    reason = compile_fallback(model)
    assert reason is not None and reason.startswith("TorchRuntimeError")
    eager = certify(twin(), IMAGE, [0], sigma=0.5, n0=100, n=N, compile=False)
    assert counts(records) == counts(again) == counts(eager)
    assert compile_fallback(twin()) is None and fallback_metadata(twin()) == {}
    path = write_records(
        records, tmp_path / "r.parquet", {"test_set": "t", **fallback_metadata(model)}
    )
    assert read_metadata(path)["compile_fallback"] == reason

    with pytest.raises(CertificationError, match=r"torch\.compile cannot compile this model"):
        certify(twin(), IMAGE, [0], sigma=0.5, n0=10, n=100, compile=True)
