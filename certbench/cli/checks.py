"""Numeric options of the commands, checked when the command line is parsed: before any
model, data set or heavy library is loaded (issue 25 §4: ``--sigma -1`` failed after 17 s,
``--sigma 1e6`` ran to 100 % abstention without a word; issue 34 §6: ``train --sigma -1`` was
refused after 64 s, once the data had loaded).

Impossible values are usage errors (exit 2) that say the valid range; legal but useless values
are warnings that say why. Every numeric option of every command declares its domain: whole
numbers by typer's ``min``/``max``, real numbers by a :class:`Bounds` callback, which also refuses
NaN and infinities (``float("nan") < 0`` is False, so a plain ``min`` lets NaN through).

The ranges follow randomized smoothing's definitions (Cohen, Rosenfeld & Kolter, "Certified
Adversarial Robustness via Randomized Smoothing", ICML 2019, https://arxiv.org/abs/1902.02918):
σ > 0 is the standard deviation of Gaussian noise added to
pixels in [0, 1]; α ∈ (0, 1) the probability that a certificate is wrong; n0 ≥ 1 selection
and n ≥ 1 estimation samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, TypeVar

import typer

N = TypeVar("N", int, float, Sequence[float], Sequence[int], None)

SIGMA_WARN = 4.0
"""Above this σ the noise (std σ on [0, 1] pixels) buries any image: the papers certify at
σ ≤ 1 (Cohen et al.: 0.12, 0.25, 0.5, 1.0)."""
ALPHA_WARN = 0.1
"""Above this α a certificate is wrong more than one time in ten: the papers use 0.001."""


def warn(text: str) -> None:
    """One yellow line on stderr: the run goes on (rich imported here: the client commands
    that use this module load nothing but typer at start)."""
    from rich.console import Console

    Console(stderr=True, soft_wrap=True).print(f"[bold yellow]warning:[/] {text}", highlight=False)


@dataclass(frozen=True)
class Bounds:
    """The domain of a real-valued option, checked when the command line is parsed (a typer
    callback: no model, data set or heavy library is loaded yet). ``meaning`` says what the
    option is, in the refusal. Lists (a repeated option) are checked element by element."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    meaning: str = ""

    def contains(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or not (
            value > self.high or (self.high_open and value == self.high)
        )

    def describe(self) -> str:
        """``a finite number > 0``, ``a finite number in (0, 1)``, ..."""
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"a finite number in {left}{self.low:g}, {self.high:g}{right}"
        if self.low is not None:
            return f"a finite number {'>' if self.low_open else '≥'} {self.low:g}"
        if self.high is not None:
            return f"a finite number {'<' if self.high_open else '≤'} {self.high:g}"
        return "a finite number"

    def outside(self) -> list[float]:
        """Values this domain refuses (what the tests feed every option)."""
        refused = [math.nan, math.inf]
        if self.low is not None:
            refused.append(self.low if self.low_open else self.low - 1)
        if self.high is not None:
            refused.append(self.high if self.high_open else self.high + 1)
        return refused

    def __call__(self, value: N) -> N:
        if value is None:
            return value
        for item in value if isinstance(value, Sequence) else [value]:
            if not self.contains(float(item)):
                what = f"{self.meaning} must be " if self.meaning else "must be "
                raise typer.BadParameter(f"{item:g}: {what}{self.describe()}")
        return value


POSITIVE = Bounds(0, low_open=True)
"""A finite number > 0 (a rate, a step, a noise level)."""
NON_NEGATIVE = Bounds(0)
"""A finite number ≥ 0 (a weight decay, a loss weight, 0 meaning none)."""
LEVEL = Bounds(0, 1, low_open=True, high_open=True, meaning="a confidence level")
"""A confidence level in (0, 1)."""
SIGNIFICANCE = Bounds(0, 1, low_open=True, high_open=True, meaning="a significance level")
"""A significance level (probability of a false alarm) in (0, 1)."""
FRACTION = Bounds(0, 1, meaning="a fraction")
"""A fraction in [0, 1]."""
EPS = Bounds(0, 255, low_open=True, meaning="ε in units of 1/255")
"""An ℓ∞ radius in units of 1/255: more than 0, at most the whole pixel range."""


def check_sigma(value: float | None) -> float | None:
    """σ > 0 and finite (usage error otherwise); a warning above SIGMA_WARN. For certify and
    predict, where leaving it out takes the manifest's σ."""
    return _sigma(value, "; leave it out to use the manifest's")


def check_training_sigma(value: float) -> float:
    """``check_sigma`` for ``train``, whose σ is the noise it trains at (and writes to the
    manifest)."""
    checked = _sigma(value, "")
    assert checked is not None
    return checked


def _sigma(value: float | None, hint: str) -> float | None:
    if value is None:
        return None
    if not math.isfinite(value) or value <= 0:
        raise typer.BadParameter(
            f"{value:g}: σ is the standard deviation of the Gaussian noise and must be a finite "
            f"number > 0 (the papers use 0.12 to 1.0){hint}"
        )
    if value > SIGMA_WARN:
        warn(
            f"--sigma {value:g} on pixels in [0, 1]: the noise buries every image, so the "
            "smoothed classifier is near chance and abstains almost everywhere (radius 0); the "
            f"papers certify at σ ≤ 1, and σ > {SIGMA_WARN:g} is almost surely a typo"
        )
    return value


def check_alpha(value: float | None) -> float | None:
    """0 < α < 1 (usage error otherwise); a warning above ALPHA_WARN. None (an optional α left
    out, as ``metrics --alpha``) passes."""
    if value is None:
        return None
    if not 0 < value < 1:
        raise typer.BadParameter(
            f"{value:g}: α is the probability that a certificate is wrong and must lie in (0, 1) "
            "(the papers use 0.001)"
        )
    if value > ALPHA_WARN:
        warn(
            f"--alpha {value:g}: each certificate holds only with probability {1 - value:.2g}; "
            "the papers use 0.001"
        )
    return value


def warn_if_never_certifies(n: int, alpha: float) -> None:
    """Warn when n samples can never give p̲_A > 1/2 at level α, so every image abstains.

    With all n samples on the top class, the Clopper-Pearson lower bound is α^(1/n) (the α
    quantile of Beta(n, 1)); it exceeds 1/2 only when n > log(α)/log(1/2) = log2(1/α).
    """
    needed = math.floor(math.log2(1 / alpha)) + 1
    if n < needed:
        warn(
            f"--n {n} at α = {alpha:g} can never certify: even when every sample agrees the "
            f"lower bound is α^(1/n) = {alpha ** (1 / n):.3f} ≤ 1/2, so every image abstains; "
            f"use n ≥ {needed} (the papers: 100,000)"
        )


Sigma = Annotated[
    float | None,
    typer.Option(help="Noise level σ > 0 (pixels in [0, 1]); manifest's by default.",
                 callback=check_sigma),
]  # fmt: skip
Alpha = Annotated[
    float, typer.Option(help="Probability that a certificate is wrong, in (0, 1).",
                        callback=check_alpha),
]  # fmt: skip
Samples = Annotated[int, typer.Option(help="Noise samples for the estimate (n ≥ 1).", min=1)]
SelectSamples = Annotated[int, typer.Option(help="Noise samples to pick the class.", min=1)]
OptionalBatchSize = Annotated[
    int | None,
    typer.Option(help="Images × samples per forward (≥ 1); the device's default if unset.", min=1),
]
Skip = Annotated[int, typer.Option(help="Use every skip-th image (≥ 1).", min=1)]
Limit = Annotated[int | None, typer.Option(help="Use at most this many images (≥ 1).", min=1)]
SEED_MAX = 2**63 - 1
"""Integer seeds (torch, NumPy) are at most a signed 64-bit number and never negative."""


def output_folder(value: Path | None) -> Path | None:
    """Option callback: refuse an output folder inside a Python package (issue 25 §3: the
    README's ``--out models/`` wrote weights into the repository's ``models`` package, beside its
    code). The nearest existing folder of ``value`` (itself or an ancestor) must not hold an
    ``__init__.py``."""
    if value is None:
        return None
    existing = value.expanduser().absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.is_dir() and (existing / "__init__.py").is_file():
        raise typer.BadParameter(
            f"{str(value)!r} is inside the Python package {existing.name!r} (it holds "
            "__init__.py): weights and manifests there would sit among its code. Write them to "
            f"a folder of their own, e.g. --out {DEFAULT_MODELS_DIR}/"
        )
    return value


DEFAULT_MODELS_DIR = "certbench-models"
"""Where ``certbench download`` writes by default (relative to the working directory)."""
