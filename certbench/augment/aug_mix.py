"""AugMix (Hendrycks et al., ICLR 2020) on uint8 tensors, as trained in Sun et al., ECCV 2022.

Per image ``x``: ``width = 3`` chains, each a copy of ``x`` passed through ``depth`` operations
(``depth`` uniform in {1, 2, 3}), each operation drawn uniformly from the nine of AugMix's CIFAR
code that do not overlap CIFAR-C (autocontrast, equalize, posterize, solarize, rotate, shear_x,
shear_y, translate_x, translate_y); then ``mix = Σ w_i·chain_i`` with ``w ~ Dirichlet(α·1)`` and
``x_augmix = (1 − m)·x + m·mix`` with ``m ~ Beta(α, α)``, ``α = 1``. Operations act on uint8
images (as PIL does), mixing is in float [0, 1].

Magnitudes follow AugMix's released ``augmentations.py`` (github.com/google-research/augmix):
a level ``ℓ ~ U(0.1, severity)`` per operation, then ``int(ℓ·max/10)`` or ``ℓ·max/10``:
posterize keeps ``4 − int(ℓ·4/10)`` bits, solarize inverts pixels ``≥ 256 − int(ℓ·256/10)``,
rotate by ``±int(ℓ·30/10)`` degrees, shear by ``±ℓ·0.3/10`` (PIL's affine about the top-left
corner), translate by ``±int(ℓ·(W/3)/10)`` pixels; bilinear resampling, zero fill.

Two variants (``variant=``):

- ``"hendrycks"`` (default): AugMix's CIFAR code, ``severity = 3`` for every operation, each
  chain restarting from ``x``.
- ``"reference"``: what the release of Sun et al. (ECCV 2022) actually ran
  (github.com/jiachens/FourierMix, ``code/augment_and_mix.py``): each operation's severity drawn
  from {1, …, 5}; a chain's ``depth`` operations are *distinct* (``random.sample``); and the chains
  do not restart from ``x`` — each continues from the previous chain's last image (the release sets
  its working image once, before the loop). The mixing formula is the same.

The paper cites Hendrycks et al. for AugMix and does not describe these differences, so the
default follows Hendrycks et al.; ``reference`` reproduces the release when matching its numbers
matters.

Why not ``torchvision.transforms.v2.AugMix``: it draws magnitudes from the discrete grid
``linspace(0, max, 10)[randint(severity)]`` (for severity 3: 0, max/9 or 2·max/9; AugMix draws
``U(0.1, 3)·max/10``), mixes and rounds in uint8, uses the global torch RNG (no per-image
stream) and shares one operation chain across a batch. We use its functional kernels
(``torchvision.transforms.v2.functional``) for the operations themselves.

Each image's choices come from ``numpy.random.default_rng(seeds[i])``, so a batch equals its images
augmented one by one. The operations run image by image on the CPU (their parameters and
histograms differ per image); run AugMix in DataLoader workers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torchvision import tv_tensors
from torchvision.transforms.v2 import InterpolationMode, Transform
from torchvision.transforms.v2 import functional as TF

from certbench.augment.seeds import check_seeds, sub_seeds
from certbench.errors import AugmentationError

__all__ = ["OPERATIONS", "AugMix", "AugMixConfig", "augmix"]

Variant = Literal["hendrycks", "reference"]
_BILINEAR = InterpolationMode.BILINEAR


def _signed(rng: np.random.Generator, value: float) -> float:
    """``value`` with a random sign (AugMix: negate when ``uniform() > 0.5``)."""
    return -value if rng.random() > 0.5 else value


def _autocontrast(img: torch.Tensor, level: float, rng: np.random.Generator) -> torch.Tensor:
    return TF.autocontrast(img)


def _equalize(img: torch.Tensor, level: float, rng: np.random.Generator) -> torch.Tensor:
    return TF.equalize(img)


def _posterize(img: torch.Tensor, level: float, rng: np.random.Generator) -> torch.Tensor:
    return TF.posterize(img, 4 - int(level * 4 / 10))


def _solarize(img: torch.Tensor, level: float, rng: np.random.Generator) -> torch.Tensor:
    return TF.solarize(img, 256 - int(level * 256 / 10))


def _rotate(img: torch.Tensor, level: float, rng: np.random.Generator) -> torch.Tensor:
    degrees = _signed(rng, int(level * 30 / 10))
    return TF.rotate(img, degrees, interpolation=_BILINEAR, fill=0)


def _shear(axis: int) -> Callable[[torch.Tensor, float, np.random.Generator], torch.Tensor]:
    def op(img: torch.Tensor, level: float, rng: np.random.Generator) -> torch.Tensor:
        amount = _signed(rng, level * 0.3 / 10)
        # PIL's affine (1, a, 0, 0, 1, 0) shears about the top-left corner: torchvision's
        # affine with centre (0, 0) and a shear angle of atan(a) degrees.
        shear = [math.degrees(math.atan(amount)), 0.0]
        if axis == 1:
            shear = shear[::-1]
        return TF.affine(
            img,
            angle=0.0,
            translate=[0, 0],
            scale=1.0,
            shear=shear,
            interpolation=_BILINEAR,
            fill=0,
            center=[0, 0],
        )

    return op


def _translate(axis: int) -> Callable[[torch.Tensor, float, np.random.Generator], torch.Tensor]:
    def op(img: torch.Tensor, level: float, rng: np.random.Generator) -> torch.Tensor:
        size = img.shape[-1] if axis == 0 else img.shape[-2]
        pixels = _signed(rng, int(level * (size / 3) / 10))
        shift = [pixels, 0] if axis == 0 else [0, pixels]
        return TF.affine(
            img,
            angle=0.0,
            translate=shift,
            scale=1.0,
            shear=[0.0, 0.0],
            interpolation=_BILINEAR,
            fill=0,
        )

    return op


OPERATIONS: dict[str, Callable[[torch.Tensor, float, np.random.Generator], torch.Tensor]] = {
    "autocontrast": _autocontrast,
    "equalize": _equalize,
    "posterize": _posterize,
    "solarize": _solarize,
    "rotate": _rotate,
    "shear_x": _shear(0),
    "shear_y": _shear(1),
    "translate_x": _translate(0),
    "translate_y": _translate(1),
}
"""AugMix's CIFAR operations (``augmentations.augmentations``), in its order."""


@dataclass(frozen=True)
class AugMixConfig:
    """AugMix hyper-parameters (AugMix's CIFAR defaults: severity 3, width 3, depth 1-3, α 1)."""

    severity: int = 3
    width: int = 3
    depth: int = -1
    alpha: float = 1.0
    variant: Variant = "hendrycks"

    def __post_init__(self) -> None:
        if isinstance(self.severity, bool) or not 1 <= self.severity <= 10:
            raise AugmentationError(f"AugMix severity must be in 1..10, got {self.severity!r}")
        if isinstance(self.width, bool) or not isinstance(self.width, int) or self.width < 1:
            raise AugmentationError(f"AugMix width must be an integer >= 1, got {self.width!r}")
        if self.depth == 0 or self.depth > len(OPERATIONS):
            raise AugmentationError(
                f"AugMix depth must be -1 (random 1..3) or 1..{len(OPERATIONS)}, got {self.depth}"
            )
        if not self.alpha > 0:
            raise AugmentationError(f"AugMix alpha must be > 0, got {self.alpha!r}")
        if self.variant not in ("hendrycks", "reference"):
            raise AugmentationError(
                f"AugMix variant must be 'hendrycks' or 'reference', got {self.variant!r}"
            )


_NAMES = tuple(OPERATIONS)


def _chain(image: torch.Tensor, rng: np.random.Generator, cfg: AugMixConfig) -> torch.Tensor:
    """One chain: ``depth`` operations with their levels, applied to ``image`` (uint8)."""
    if cfg.variant == "reference":
        # The release: depth = random.choice(range(1, width + 1)) distinct operations.
        depth = int(rng.integers(1, cfg.width + 1))
        names = [_NAMES[i] for i in rng.permutation(len(_NAMES))[:depth]]
    else:
        depth = cfg.depth if cfg.depth > 0 else int(rng.integers(1, 4))
        names = [_NAMES[i] for i in rng.integers(0, len(_NAMES), size=depth)]
    for name in names:
        severity = int(rng.integers(1, 6)) if cfg.variant == "reference" else cfg.severity
        level = float(rng.uniform(0.1, severity))
        image = OPERATIONS[name](image, level, rng)
    return image


def _augmix_one(image: torch.Tensor, seed: int, cfg: AugMixConfig) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    weights = rng.dirichlet([cfg.alpha] * cfg.width)
    m = float(rng.beta(cfg.alpha, cfg.alpha))
    mix = torch.zeros(image.shape, dtype=torch.float32)
    current = image
    for i in range(cfg.width):
        start = current if cfg.variant == "reference" else image
        current = _chain(start, rng, cfg)
        mix += float(weights[i]) * current.to(torch.float32)
    mixed = (1.0 - m) * image.to(torch.float32) + m * mix
    return mixed.div_(255.0)


def augmix(
    images: torch.Tensor, seeds: Sequence[int], config: AugMixConfig | None = None
) -> torch.Tensor:
    """AugMix of a uint8 batch ``(B, C, H, W)``; image ``i`` seeded by ``seeds[i]``.

    Returns float32 in [0, 1] on the CPU. Raises AugmentationError for a non-uint8 or wrongly
    shaped batch or a seed count mismatch.
    """
    cfg = config or AugMixConfig()
    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8 or images.ndim != 4:
        got = f"{getattr(images, 'dtype', type(images).__name__)} {tuple(images.shape)}"
        raise AugmentationError(
            f"AugMix needs a uint8 tensor (B, C, H, W) (its operations act on 8-bit pixels), got "
            f"{got}; convert [0, 1] floats with (x * 255).round().to(torch.uint8)"
        )
    seeds = check_seeds(seeds, images.shape[0])
    cpu = images.cpu()
    out = torch.stack([_augmix_one(cpu[i], seed, cfg) for i, seed in enumerate(seeds)])
    return out.to(images.device)


def _is_plain_tensor(value: Any) -> bool:
    """A bare ``torch.Tensor`` (not a tv_tensor such as a mask or boxes): treated as images."""
    return type(value) is torch.Tensor


class AugMix(Transform):
    """AugMix as a ``torchvision.transforms.v2`` transform on uint8 image tensors.

    Takes ``(C, H, W)`` or ``(B, C, H, W)`` uint8 tensors (or float in [0, 1], quantised to
    uint8 first) and returns float32 in [0, 1]. Each call draws a call seed from the
    transform's own generator (seeded by ``seed``); image ``i`` uses ``derive_seed(call, i)``.
    """

    _transformed_types = (tv_tensors.Image, _is_plain_tensor)

    def __init__(self, config: AugMixConfig | None = None, *, seed: int = 0) -> None:
        super().__init__()
        self.config = config or AugMixConfig()
        self._rng = np.random.default_rng(seed)

    def apply(self, images: torch.Tensor, seeds: Sequence[int]) -> torch.Tensor:
        """:func:`augmix` with this transform's configuration."""
        return augmix(images, seeds, self.config)

    def make_params(self, flat_inputs: list[Any]) -> dict[str, Any]:
        return {"seed": int(self._rng.integers(0, 2**63))}

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        single = inpt.ndim == 3
        batch = inpt[None] if single else inpt
        if batch.is_floating_point():
            batch = batch.mul(255.0).round().clamp(0, 255).to(torch.uint8)
        out = self.apply(batch, sub_seeds(params["seed"], batch.shape[0]))
        out = out[0] if single else out
        return tv_tensors.wrap(out, like=inpt) if isinstance(inpt, tv_tensors.Image) else out
