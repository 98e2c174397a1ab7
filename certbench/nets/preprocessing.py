"""Whether float32 can normalise with a manifest's ``mean`` and ``std``, checked without torch.

The classifier's NormalizeLayer (``certbench.nets.architectures``) holds ``mean`` and ``std`` in
float32 and divides by ``std``; the manifest's loader (``certbench.nets.manifest``) refuses the
values float32 cannot hold before anything is built. Both use :func:`preprocessing_problem`,
which lives here so that neither module imports the other.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["FLOAT32_MAX", "FLOAT32_SMALLEST_NORMAL", "preprocessing_problem"]

#: float32, in which the NormalizeLayer holds ``mean`` and ``std`` and divides: its largest
#: finite number and its smallest normal one (IEEE 754 binary32).
FLOAT32_MAX = 3.4028234663852886e38
FLOAT32_SMALLEST_NORMAL = 2.0**-126


def preprocessing_problem(mean: Sequence[float], std: Sequence[float]) -> str | None:
    """Why float32 cannot normalise with ``mean``/``std`` (None: it can): a value beyond
    float32's range becomes ±inf, and a std below its smallest normal number (1.2·10⁻³⁸; the
    1e-300 an attack campaign sent, issue 35 §4) becomes 0 or a subnormal number whose
    reciprocal is infinite, so every normalised input is ±inf or NaN. Larger values that still
    overflow deeper in the network are the dummy forward pass's to find (``non_finite_output``)."""
    for name, values in (("mean", mean), ("std", std)):
        for i, value in enumerate(values):
            if not abs(value) <= FLOAT32_MAX:
                return (
                    f"preprocessing.{name}[{i}] = {value:g} is beyond float32's range (±3.4e38), "
                    "in which inputs are normalised"
                )
    for i, value in enumerate(std):
        if abs(value) < FLOAT32_SMALLEST_NORMAL:
            return (
                f"preprocessing.std[{i}] = {value:g} is below float32's smallest normal number "
                "(1.2e-38): float32 holds it as 0 or a subnormal number, and (x − mean) / std "
                "is infinite; give the per-channel standard deviation of the training images "
                "(0.2 to 0.3 for CIFAR)"
            )
    return None
