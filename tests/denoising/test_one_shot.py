"""Carlini et al.'s one-shot denoising (ICLR 2023, arXiv:2206.10550) as the released code runs it.

With an oracle noise predictor, one that returns the very ε the diffusion's forward process put
into x_t, one-shot denoising must give the clean image back: x̂₀ = (x_t − √(1 − ᾱ_t)·ε)/√ᾱ_t.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from certbench.denoising.config import DENOISER_PRESETS, DiffusionDenoiserConfig
from certbench.denoising.diffusion import DiffusionDenoiser, build_unet
from certbench.denoising.schedule import NoiseSchedule

SIGMA = 0.5


class Oracle(nn.Module):
    """Test-only noise predictor: knows the clean images and returns the true ε of x_t,
    ε = (x_t − √ᾱ_t·(2x − 1))/√(1 − ᾱ_t), computed in float64; optionally as diffusers'
    ``.sample`` and with extra learned-variance channels (garbage the denoiser must ignore)."""

    def __init__(self, clean: torch.Tensor, alpha_bar: float, *, wrap: bool, variance: bool):
        super().__init__()
        self.clean, self.alpha_bar, self.wrap, self.variance = clean, alpha_bar, wrap, variance
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    def forward(self, x_t: torch.Tensor, timesteps: torch.Tensor) -> object:
        self.calls.append((x_t.clone(), timesteps.clone()))
        a = torch.tensor(self.alpha_bar, dtype=torch.float64)
        eps = (x_t.double() - a.sqrt() * (self.clean.double() * 2 - 1)) / (1 - a).sqrt()
        out = eps.float()
        if self.variance:
            out = torch.cat([out, torch.full_like(out, 1e6)], dim=1)
        return SimpleNamespace(sample=out) if self.wrap else out


@pytest.mark.parametrize(("wrap", "variance"), [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("kind", ["linear", "cosine"])
def test_an_oracle_noise_predictor_gives_the_clean_image_back(kind, wrap, variance):
    schedule = NoiseSchedule.named(kind, 1000)
    t = schedule.timestep(SIGMA)
    generator = torch.Generator().manual_seed(0)
    clean = torch.rand((5, 3, 16, 16), generator=generator)
    noisy = clean + SIGMA * torch.randn(clean.shape, generator=generator)
    oracle = Oracle(clean, float(schedule.alphas_cumprod[t]), wrap=wrap, variance=variance)
    denoised = DiffusionDenoiser(oracle, schedule, SIGMA)(noisy)
    torch.testing.assert_close(denoised, clean, atol=1e-5, rtol=0)
    ((x_t, timesteps),) = oracle.calls
    assert timesteps.dtype == torch.long and timesteps.tolist() == [t] * 5
    scale = torch.tensor(schedule.alphas_cumprod[t], dtype=torch.float64).sqrt().float()
    torch.testing.assert_close(x_t, scale * (2 * noisy - 1), atol=1e-6, rtol=0)


def test_the_denoised_image_is_clamped_to_the_pixel_range():
    """The release's ``clip_denoised=True``: x̂₀ clamped to [−1, 1], i.e. [0, 1] pixels."""
    schedule = NoiseSchedule.named("linear", 1000)

    def no_noise(x_t: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x_t)

    class Zero(nn.Module):
        forward = staticmethod(no_noise)

    noisy = torch.tensor([-3.0, -0.2, 0.3, 1.7]).view(1, 1, 2, 2).expand(1, 3, 2, 2)
    denoised = DiffusionDenoiser(Zero(), schedule, SIGMA)(noisy)
    assert denoised.min() == 0.0 and denoised.max() == 1.0
    torch.testing.assert_close(denoised[0, 0].flatten()[1:3], torch.tensor([0.0, 0.3]))


def test_a_noise_predictor_with_the_wrong_channels_is_refused():
    schedule = NoiseSchedule.named("linear", 1000)

    class Five(nn.Module):
        def forward(self, x_t: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:
            return torch.zeros((x_t.shape[0], 5, *x_t.shape[2:]))

    with pytest.raises(ValueError, match="returned 5 channels; expected 3"):
        DiffusionDenoiser(Five(), schedule, SIGMA)(torch.rand(2, 3, 8, 8))


def test_a_diffusers_unet_denoises_each_image_independently_of_its_batch():
    """The U-Net (GroupNorm, attention, one timestep for all) acts image by image in eval mode:
    an image's denoised output is the same alone as among others, to round-off."""
    config = DENOISER_PRESETS["unet-demo"]
    assert isinstance(config, DiffusionDenoiserConfig)
    torch.manual_seed(0)
    unet = build_unet(config.unet).eval()
    denoiser = DiffusionDenoiser(unet, NoiseSchedule.named("linear", 1000), SIGMA).eval()
    x = torch.rand((6, 3, 32, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        batch = denoiser(x)
        alone = torch.cat([denoiser(x[i : i + 1]) for i in range(6)])
    assert batch.shape == x.shape and float(batch.min()) >= 0 and float(batch.max()) <= 1
    torch.testing.assert_close(batch, alone, atol=1e-5, rtol=0)
