"""FourierMix (Sun et al., ECCV 2022, §3 and Algorithm 1): spectrally diverse augmentation.

Per image ``x`` in [0, 1] and each of ``width`` chains (Algorithm 1, lines 3-11):

1. severities ``s_A`` and ``s_P`` are drawn uniformly from five levels each (Appendix E: for
   CIFAR ``s_A ∈ {0.2, 0.3, 0.4, 0.5, 0.6}`` and ``s_P ∈ {π/12, π/10, π/8, π/6, π/4}``);
2. amplitude operator (Eq. 1): every spectral amplitude is multiplied by its own factor
   ``U(1 − s_A, 1 + s_A)``;
3. phase operator (Eq. 2): every spectral phase gets additive noise from the normal
   ``N(0, σ²)`` truncated to ``[−s_P, s_P]``, PDF ``φ(x/σ) / (σ·(2Φ(s_P/σ) − 1))``, with
   ``σ = 5`` (Appendix E);
4. ``x_f = IFFT(A ∘ P (FFT(x)))``;
5. a random affine transform ``T_i`` of the *original* image and ``t ~ Beta(α, α)`` give the
   chain's image ``t·x_f + (1 − t)·T_i(x)``;

the chains are mixed with ``w ~ Dirichlet(α, …, α)`` and finally
``x_aug = m·x + (1 − m)·Σ w_i·chain_i`` with ``m ~ Beta(α, α)`` (lines 12-13).

Constants the paper leaves out come from the authors' release (github.com/jiachens/FourierMix,
``code/fourier_augment.py`` at commit 5a5a9b1 "restore", Jan 2022, the version whose structure is
Algorithm 1): ``width = 3`` chains (Algorithm 1's ``k``; the "k = 2" of §3 is the number of
augmented *views* per image in HCR, a different k), ``α = 1``, and the affine transform is
``RandomAffine(degrees=d, translate=(f, f), shear=s)`` with ``d``, ``f``, ``s`` each drawn
uniformly from 8 levels of which the first 4 are "off": ``d ∈ {0,0,0,0, 2.5, 5, 7.5, 10}``°,
``f ∈ {0,0,0,0, 1/24, 1/12, 1/8, 1/6}`` of the image size (integer pixels, as torchvision
rounds), ``s ∈ {0,0,0,0, 0.03, 0.07, 0.11, 0.15}``. torchvision reads a scalar ``shear`` as an
x-shear range in *degrees*, so these shears are tiny; we keep the released values as they are.

Where paper and release differ (we follow the paper, whose equations define the method):

- amplitude: the release multiplies by ``1 + flag·U(0, 1)·s_A`` with one random sign ``flag``
  per chain (all factors above 1 or all below); Eq. 1 draws ``U(1 − s_A, 1 + s_A)`` per bin.
- phase: the release adds ``U(−s_P, s_P)``; Eq. 2 the truncated normal with σ = 5, which is
  nearly uniform on ``[−s_P, s_P]`` (density ratio centre/edge ≤ 1.013 for s_P ≤ π/4).
- realness: the release perturbs each bin independently and keeps ``|IFFT(·)|``; we draw the
  noise on one bin of each conjugate pair ``{k, −k}`` and mirror it (same factor, opposite
  phase), so the spectrum stays Hermitian and ``IFFT`` is real while every bin keeps the stated
  marginal law. Self-conjugate bins (DC and Nyquist) are real: they get the amplitude factor
  and no phase change (4 of 1,024 bins per channel at 32×32).
- range: the release does not clip ``x_f``; we clip it to [0, 1], so every FourierMix image is a
  convex combination of [0, 1] images and stays in [0, 1] like every certbench input.
- base augmentation: the release random-crops and flips each *view* after FourierMix; certbench
  crops and flips each image once before its views are made (AugMix's order, so the JSD and HCR
  consistency compare views of the same crop).

Randomness: each image's parameters come from its own seed (``seeds[i]``): scalar choices from
``numpy.random.default_rng(seed)`` and the per-bin noise from
:class:`~certbench.augment.seeds.RandomStream` (numpy on the CPU, torch's Philox on CUDA, all 64
seed bits used). A batch therefore equals the same images augmented one by one, whatever the
batch size; CPU and CUDA streams differ, so results are reproducible per device type.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torchvision import tv_tensors
from torchvision.transforms.v2 import Transform

from certbench.augment.affine import affine_batch
from certbench.augment.seeds import RandomStream, check_seeds, sub_seeds
from certbench.errors import AugmentationError

__all__ = [
    "CIFAR_AMPLITUDE_SEVERITIES",
    "CIFAR_PHASE_SEVERITIES",
    "IMAGENET_PHASE_SEVERITIES",
    "FourierMix",
    "FourierMixConfig",
    "FourierMixParameters",
    "draw_parameters",
    "fourier_mix",
    "fourier_operation",
    "reflect",
    "spectral_noise",
    "truncated_normal_icdf",
]

CIFAR_AMPLITUDE_SEVERITIES = (0.2, 0.3, 0.4, 0.5, 0.6)
"""s_A levels for CIFAR-10/100 and ImageNet (Sun et al., ECCV 2022, Appendix E)."""
CIFAR_PHASE_SEVERITIES = (math.pi / 12, math.pi / 10, math.pi / 8, math.pi / 6, math.pi / 4)
"""s_P levels for CIFAR-10/100 (Sun et al., ECCV 2022, Appendix E; the release's
``π / (2·{6,5,4,3,2})``)."""
IMAGENET_PHASE_SEVERITIES = (
    math.pi / 4,
    3 * math.pi / 10,
    3 * math.pi / 8,
    math.pi / 2,
    3 * math.pi / 4,
)
"""s_P levels for ImageNet (Sun et al., ECCV 2022, Appendix E)."""


@dataclass(frozen=True)
class FourierMixConfig:
    """FourierMix's hyper-parameters; the defaults are the CIFAR ones of paper and release."""

    width: int = 3
    alpha: float = 1.0
    amplitude_severities: tuple[float, ...] = CIFAR_AMPLITUDE_SEVERITIES
    phase_severities: tuple[float, ...] = CIFAR_PHASE_SEVERITIES
    phase_sigma: float = 5.0
    rotation_degrees: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0, 2.5, 5.0, 7.5, 10.0)
    translate_fractions: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0, 1 / 24, 1 / 12, 1 / 8, 1 / 6)
    shear_degrees: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0, 0.03, 0.07, 0.11, 0.15)
    clip: bool = field(default=True)

    def __post_init__(self) -> None:
        if isinstance(self.width, bool) or not isinstance(self.width, int) or self.width < 1:
            raise AugmentationError(f"FourierMix width must be an integer >= 1, got {self.width!r}")
        if not self.alpha > 0:
            raise AugmentationError(f"FourierMix alpha must be > 0, got {self.alpha!r}")
        if not self.phase_sigma > 0:
            raise AugmentationError(f"phase_sigma must be > 0, got {self.phase_sigma!r}")
        if not self.amplitude_severities or any(not 0 <= s < 1 for s in self.amplitude_severities):
            raise AugmentationError(
                f"amplitude_severities must be values in [0, 1), got {self.amplitude_severities}"
            )
        if not self.phase_severities or any(not 0 < s <= math.pi for s in self.phase_severities):
            raise AugmentationError(
                f"phase_severities must be values in (0, π], got {self.phase_severities}"
            )
        for name in ("rotation_degrees", "translate_fractions", "shear_degrees"):
            values = getattr(self, name)
            if not values or any(v < 0 for v in values):
                raise AugmentationError(f"{name} must be non-negative levels, got {values}")


# ----------------------------------------------------------------------------- the operators


def truncated_normal_icdf(u: torch.Tensor, sigma: float, bound: torch.Tensor) -> torch.Tensor:
    """Map ``u ~ U(0, 1)`` to ``N(0, σ²)`` truncated to ``[−bound, bound]`` (inverse CDF).

    ``x = σ·Φ⁻¹(Φ(−b/σ) + u·(2Φ(b/σ) − 1))`` has exactly the PDF of Sun et al., ECCV 2022, Eq. 2,
    ``φ(x/σ) / (σ·(2Φ(b/σ) − 1))`` on ``|x| ≤ b``, and is odd in ``u − 1/2``. Computed in the
    dtype of ``u`` (Φ stays near 1/2 for σ = 5, where float32 is well conditioned).
    """
    bound = bound.to(u.dtype)
    z = bound / sigma
    low = torch.special.ndtr(-z)
    mass = 2.0 * torch.special.ndtr(z) - 1.0
    x = sigma * torch.special.ndtri(low + u * mass)
    return torch.minimum(torch.maximum(x, -bound), bound)


def reflect(values: torch.Tensor) -> torch.Tensor:
    """``S(−u, −v)`` of an *unshifted* spectrum ``(…, H, W)``: index ``i`` takes ``(−i) mod n``.

    A flip and a roll by one (contiguous copies, much faster than two ``index_select``).
    """
    return torch.roll(torch.flip(values, dims=(-2, -1)), shifts=(1, 1), dims=(-2, -1))


@lru_cache(maxsize=16)
def _pair_masks(height: int, width: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Unshifted-layout masks: ``keep`` holds one bin of each pair ``{k, −k}``; self-conjugate."""
    flat = torch.arange(height * width).view(height, width)
    mirror = reflect(flat)
    return (flat < mirror).to(device), (flat == mirror).to(device)


def spectral_noise(
    uniforms: torch.Tensor,
    amplitude_severity: torch.Tensor,
    phase_severity: torch.Tensor,
    phase_sigma: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Amplitude factors and phase shifts ``(…, H, W)`` in unshifted FFT layout, Hermitian-paired.

    ``uniforms`` is ``(…, 2, H, W)`` of U(0, 1) draws (amplitude, phase); severities broadcast
    against ``(…)``. The draw of the canonical bin of each conjugate pair serves both bins:
    the mirror gets the same amplitude factor and the opposite phase (``u → 1 − u`` maps the
    symmetric truncated normal to its negative); self-conjugate bins get phase 0. So a Hermitian
    spectrum stays Hermitian and each bin keeps the marginal law of Eq. 1 / Eq. 2.
    Returns ``(factor, phase)``.
    """
    h, w = uniforms.shape[-2:]
    keep, self_conjugate = _pair_masks(h, w, str(uniforms.device))
    mirrored = reflect(uniforms)
    u_amp = torch.where(keep, uniforms[..., 0, :, :], mirrored[..., 0, :, :])
    u_phase = torch.where(keep, uniforms[..., 1, :, :], 1.0 - mirrored[..., 1, :, :])
    s_a = amplitude_severity[..., None, None].to(uniforms.dtype)
    s_p = phase_severity[..., None, None].to(uniforms.dtype)
    factor = 1.0 - s_a + 2.0 * s_a * u_amp
    phase = truncated_normal_icdf(u_phase, phase_sigma, s_p)
    return factor, phase.masked_fill(self_conjugate, 0.0)


def fourier_operation(
    images: torch.Tensor, factor: torch.Tensor, phase: torch.Tensor, *, clip: bool = True
) -> torch.Tensor:
    """``IFFT((A ∘ P)(FFT(x)))``: scale every amplitude by ``factor``, shift its phase by ``phase``.

    ``images`` ``(…, H, W)``; ``factor``/``phase`` broadcast against them, in the unshifted
    layout of ``torch.fft.fft2`` (the operators act bin by bin, so no ``fftshift`` is needed).
    ``factor``/``phase`` must be Hermitian-paired (:func:`spectral_noise`), so the result is
    real; it is clipped to [0, 1] unless ``clip=False``.
    """
    h, w = images.shape[-2:]
    half = w // 2 + 1
    # The product of a Hermitian spectrum and Hermitian noise is Hermitian, so the real inverse
    # FFT of its half spectrum (``rfft2`` layout: the first W//2 + 1 columns) is exact.
    spectrum = torch.fft.rfft2(images)
    noise = torch.polar(factor[..., :half].to(images.dtype), phase[..., :half].to(images.dtype))
    out = torch.fft.irfft2(spectrum * noise, s=(h, w))
    return out.clamp(0.0, 1.0) if clip else out


# ----------------------------------------------------------------------------- per-image draws


@dataclass(frozen=True)
class FourierMixParameters:
    """The random choices of a batch (CPU tensors except ``uniforms``, on the images' device).

    Per image and chain ``(B, width)``: mixing ``weights`` (Dirichlet), severities
    ``amplitude`` (s_A) and ``phase`` (s_P), ``blend`` t (Beta), affine ``angle`` (degrees),
    ``tx``/``ty`` (pixels), ``shear`` (degrees); per image ``skip`` m (Beta); per image, chain
    and channel the U(0, 1) draws ``uniforms`` ``(B, width, C, 2, H, W)`` of the bin noise.
    """

    weights: torch.Tensor
    amplitude: torch.Tensor
    phase: torch.Tensor
    blend: torch.Tensor
    angle: torch.Tensor
    tx: torch.Tensor
    ty: torch.Tensor
    shear: torch.Tensor
    skip: torch.Tensor
    uniforms: torch.Tensor


def _scalar_draws(seed: int, cfg: FourierMixConfig, height: int, width: int) -> list[np.ndarray]:
    """One image's scalar choices from ``default_rng(seed)``: two vectorised numpy calls.

    Dirichlet and Beta variates are normalised Gamma(α) variates (numpy's own construction);
    a level is ``levels[⌊u·L⌋]``; ``U(−d, d) = d·(2u − 1)``; translations round half to even
    like torchvision's ``round(U(−f·W, f·W))``.
    """
    rng = np.random.default_rng(seed)
    k = cfg.width
    gamma = rng.standard_gamma(cfg.alpha, size=3 * k + 2)
    u = rng.random(size=(9, k))
    weights = gamma[:k] / gamma[:k].sum()
    blend = gamma[k : 2 * k] / (gamma[k : 2 * k] + gamma[2 * k : 3 * k])
    skip = gamma[3 * k : 3 * k + 1] / (gamma[3 * k] + gamma[3 * k + 1])

    def level(row: int, levels: tuple[float, ...]) -> np.ndarray:
        table = np.asarray(levels, dtype=np.float64)
        return table[np.minimum((u[row] * len(table)).astype(np.int64), len(table) - 1)]

    amplitude = level(0, cfg.amplitude_severities)
    phase = level(1, cfg.phase_severities)
    angle = level(2, cfg.rotation_degrees) * (2.0 * u[3] - 1.0)
    fraction = level(4, cfg.translate_fractions)
    tx = np.round(fraction * width * (2.0 * u[5] - 1.0))
    ty = np.round(fraction * height * (2.0 * u[6] - 1.0))
    shear = level(7, cfg.shear_degrees) * (2.0 * u[8] - 1.0)
    return [weights, amplitude, phase, blend, angle, tx, ty, shear, skip]


def draw_parameters(
    seeds: Sequence[int], cfg: FourierMixConfig, shape: torch.Size, device: torch.device
) -> FourierMixParameters:
    """The parameters :func:`fourier_mix` uses for images of ``shape`` seeded by ``seeds``."""
    channels, height, width = shape[-3:]
    columns = list(zip(*(_scalar_draws(s, cfg, height, width) for s in seeds), strict=True))
    scalars = [torch.from_numpy(np.stack(col)) for col in columns]
    draws = (cfg.width, channels, 2, height, width)
    uniforms = torch.stack([RandomStream(s, device, salt=1).uniform(draws) for s in seeds])
    weights, amplitude, phase, blend, angle, tx, ty, shear, skip = scalars
    return FourierMixParameters(
        weights, amplitude, phase, blend, angle, tx, ty, shear, skip.squeeze(-1), uniforms
    )


# ----------------------------------------------------------------------------- FourierMix


def fourier_mix(
    images: torch.Tensor, seeds: Sequence[int], config: FourierMixConfig | None = None
) -> torch.Tensor:
    """FourierMix of a float batch ``(B, C, H, W)`` in [0, 1], image ``i`` seeded by ``seeds[i]``.

    Runs on ``images.device`` (CPU or CUDA) in the images' float dtype; returns the same shape.
    Raises AugmentationError for non-float or wrongly shaped input or a seed count mismatch.
    """
    cfg = config or FourierMixConfig()
    _check_images(images)
    seeds = check_seeds(seeds, images.shape[0])
    draws = draw_parameters(seeds, cfg, images.shape, images.device)
    dtype, device = images.dtype, images.device
    b, k = images.shape[0], cfg.width

    def on(t: torch.Tensor) -> torch.Tensor:
        return t.to(device=device, dtype=dtype)

    factor, phase = spectral_noise(
        draws.uniforms.to(dtype),
        on(draws.amplitude)[..., None],
        on(draws.phase)[..., None],
        cfg.phase_sigma,
    )
    fourier = fourier_operation(images[:, None], factor, phase, clip=cfg.clip)
    flat = images[:, None].expand(b, k, *images.shape[1:]).reshape(b * k, *images.shape[1:])
    warped = affine_batch(
        flat,
        draws.angle.reshape(-1).float(),
        draws.tx.reshape(-1).float(),
        draws.ty.reshape(-1).float(),
        draws.shear.reshape(-1).float(),
    ).view(b, k, *images.shape[1:])
    blend = on(draws.blend)[..., None, None, None]
    chains = blend * fourier + (1.0 - blend) * warped
    mixed = (on(draws.weights)[..., None, None, None] * chains).sum(dim=1)
    skip = on(draws.skip)[:, None, None, None]
    return skip * images + (1.0 - skip) * mixed


def _check_images(images: Any) -> None:
    if not isinstance(images, torch.Tensor) or not images.is_floating_point():
        got = getattr(images, "dtype", type(images).__name__)
        raise AugmentationError(
            f"images must be a float tensor (B, C, H, W) in [0, 1], got {got}; convert uint8 "
            "with images.float() / 255"
        )
    if images.ndim != 4:
        raise AugmentationError(
            f"images must have shape (B, C, H, W), got {tuple(images.shape)}; add a batch axis "
            "with images[None]"
        )


def _is_plain_tensor(value: Any) -> bool:
    """A bare ``torch.Tensor`` (not a tv_tensor such as a mask or boxes): treated as images."""
    return type(value) is torch.Tensor


class FourierMix(Transform):
    """FourierMix as a ``torchvision.transforms.v2`` transform on image tensors.

    Takes ``(C, H, W)`` or ``(B, C, H, W)`` tensors, float in [0, 1] or uint8 (returned in the
    input dtype, uint8 rounded). Each call draws a call seed from the transform's own
    generator (seeded by ``seed``) and gives image ``i`` of the batch the seed
    ``derive_seed(call_seed, i)``, so a seeded pipeline is reproducible. For explicit per-image
    seeds (training, where a seed derives from the image index and epoch) call
    :func:`fourier_mix` or :meth:`apply`.
    """

    _transformed_types = (tv_tensors.Image, _is_plain_tensor)

    def __init__(self, config: FourierMixConfig | None = None, *, seed: int = 0) -> None:
        super().__init__()
        self.config = config or FourierMixConfig()
        self._rng = np.random.default_rng(seed)

    def apply(self, images: torch.Tensor, seeds: Sequence[int]) -> torch.Tensor:
        """:func:`fourier_mix` with this transform's configuration."""
        return fourier_mix(images, seeds, self.config)

    def make_params(self, flat_inputs: list[Any]) -> dict[str, Any]:
        return {"seed": int(self._rng.integers(0, 2**63))}

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        single = inpt.ndim == 3
        batch = inpt[None] if single else inpt
        as_float = batch.float() / 255.0 if batch.dtype == torch.uint8 else batch
        out = self.apply(as_float, sub_seeds(params["seed"], batch.shape[0]))
        if batch.dtype == torch.uint8:
            out = out.mul(255.0).round_().clamp_(0, 255).to(torch.uint8)
        out = out[0] if single else out
        return tv_tensors.wrap(out, like=inpt) if isinstance(inpt, tv_tensors.Image) else out
