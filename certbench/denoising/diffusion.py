"""Carlini et al.'s one-shot diffusion denoiser in front of a classifier's [0, 1] pixels.

Carlini, Tramèr, Dvijotham, Rice, Sun & Kolter, "(Certified!!) Adversarial Robustness for Free!",
ICLR 2023 (arXiv:2206.10550), Algorithm 1, as the released code runs it
(ethz-spylab/diffusion_denoised_smoothing, ``cifar10/DRM.py``, ``DiffusionRobustModel``):

1. pixels to [−1, 1]: ``x_in = x * 2 - 1`` (the noise σ of [0, 1] pixels becomes 2σ);
2. the step t of :func:`certbench.denoising.schedule.carlini_timestep`, where the diffusion's
   noise-to-signal ratio reaches 2σ;
3. ``x_t = √ᾱ_t · x_in``: here ``x`` is already ``x + δ``, δ ~ N(0, σ²I), drawn by certbench's
   smoothing engine from its seeded streams (the paper's x_t = √ᾱ_t (x + δ)); the release's
   ``Smooth._sample_noise`` (``cifar10/core.py``) adds no noise and ``DRM.denoise`` draws it
   inside ``q_sample`` at the discrete step's own level √(1 − ᾱ_t)/√ᾱ_t, which is 2σ to within
   0.7 % for σ ∈ {0.12, 0.25, 0.5, 1.0} on the linear 1,000-step schedule (0.1 % on the
   release's cosine 4,000-step one);
4. one call of the noise predictor ε̂(x_t, t) and improved-diffusion's
   ``_predict_xstart_from_eps``: x̂₀ = √(1/ᾱ_t)·x_t − √(1/ᾱ_t − 1)·ε̂, i.e.
   (x_t − √(1 − ᾱ_t)·ε̂)/√ᾱ_t, with coefficients computed in float64 and used in float32 as the
   code's ``_extract_into_tensor`` does;
5. ``clip_denoised=True``: x̂₀ clamped to [−1, 1], then back to [0, 1] pixels, ``(x̂₀ + 1)/2``,
   for the classifier (the release's classifiers take [−1, 1] inputs directly; certbench's take
   [0, 1] and normalise in their first layer).

A U-Net that learns its variance (improved-diffusion's ``learn_sigma``: ``2·C`` output channels)
has its output split as the code's ``th.split(model_output, C, dim=1)`` and only the first ``C``
channels, ε̂, are used. The noise predictor is ``diffusers``' ``UNet2DModel`` (the network of
DDPM's CIFAR-10 model), whose output's ``.sample`` is taken; it is called with the 0-based
timestep t as diffusers' schedulers train it.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn
from torch.fx.proxy import Proxy, TraceError

from certbench.denoising.config import UNetConfig
from certbench.denoising.schedule import NoiseSchedule

__all__ = ["DiffusionDenoiser", "build_unet", "noise_prediction"]


def build_unet(config: UNetConfig) -> nn.Module:
    """``diffusers.UNet2DModel(**config)``, randomly initialised (nothing is ever downloaded)."""
    from diffusers import UNet2DModel

    kwargs = config.model_dump()
    for key in ("block_out_channels", "down_block_types", "up_block_types"):
        kwargs[key] = tuple(kwargs[key])
    return cast(nn.Module, UNet2DModel(**kwargs))


def noise_prediction(output: Any, channels: int) -> torch.Tensor:
    """ε̂ from a noise predictor's output: diffusers' ``.sample`` (or a tuple's first item, or a
    tensor), and of ``2·channels`` learned-variance channels the first ``channels``."""
    sample = getattr(output, "sample", output)
    if isinstance(sample, tuple):
        sample = sample[0]
    if not isinstance(sample, torch.Tensor) or sample.dim() != 4:
        raise ValueError(
            f"the noise predictor must return an image batch (N, C, H, W), got "
            f"{type(sample).__name__}"
        )
    if sample.shape[1] == 2 * channels:
        return sample[:, :channels]
    if sample.shape[1] != channels:
        raise ValueError(
            f"the noise predictor returned {sample.shape[1]} channels; expected {channels} "
            f"(noise) or {2 * channels} (noise and learned variance)"
        )
    return sample


class DiffusionDenoiser(nn.Module):
    """One-shot denoising of ``x + δ`` (δ ~ N(0, σ²I), pixels in [0, 1]) with a noise predictor
    ``unet(x_t, t)`` trained on ``schedule``; returns x̂₀ in [0, 1]. Row-wise (each image's
    output depends on that image only) and deterministic in eval mode.

    The schedule's coefficients are constants derived from the configuration (non-persistent
    buffers), so the state dict holds the U-Net's tensors only (``unet.*``).
    """

    sqrt_alpha_bar: torch.Tensor
    sqrt_recip_alpha_bar: torch.Tensor
    sqrt_recipm1_alpha_bar: torch.Tensor

    def __init__(self, unet: nn.Module, schedule: NoiseSchedule, sigma: float) -> None:
        super().__init__()
        self.unet = unet
        self.schedule = schedule
        self.sigma = float(sigma)
        self.timestep = schedule.timestep(self.sigma)
        coefficients = schedule.coefficients(self.timestep)
        for name, value in zip(
            ("sqrt_alpha_bar", "sqrt_recip_alpha_bar", "sqrt_recipm1_alpha_bar"),
            coefficients,
            strict=True,
        ):
            self.register_buffer(name, torch.tensor(value, dtype=torch.float64).float(), False)

    def forward(self, noisy: torch.Tensor) -> torch.Tensor:
        if isinstance(noisy, Proxy):
            # torch.fx cannot trace diffusers' U-Net (it branches on shapes); raising fx's own
            # error lets BatchNorm folding (certbench.nets.folding) leave the composition as is.
            raise TraceError("a diffusion denoiser is not traceable by torch.fx")
        x_t = self.sqrt_alpha_bar * (noisy * 2 - 1)
        # filled on the device: a host-to-device copy would stall the engine's CUDA pipeline
        timesteps = torch.full(
            (noisy.shape[0],), self.timestep, dtype=torch.long, device=noisy.device
        )
        eps = noise_prediction(self.unet(x_t, timesteps), noisy.shape[1])
        x_start = self.sqrt_recip_alpha_bar * x_t - self.sqrt_recipm1_alpha_bar * eps
        return (x_start.clamp(-1, 1) + 1) / 2

    def extra_repr(self) -> str:
        return (
            f"sigma={self.sigma:g}, schedule={self.schedule.kind}/{self.schedule.steps}, "
            f"timestep={self.timestep}"
        )
