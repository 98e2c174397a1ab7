"""β schedules and the step of one-shot denoising against their closed forms and the release.

Carlini et al. (ICLR 2023, arXiv:2206.10550) denoise σ-noisy [0, 1] pixels at the diffusion step
whose noise-to-signal ratio reaches 2σ. Their released code (ethz-spylab/
diffusion_denoised_smoothing, ``cifar10/certify.py``) searches it with a loop; on Ho et al.'s
linear 1,000-step schedule that loop gives t = 70, 145, 259 and 396 for σ = 0.12, 0.25, 0.5 and
1.0 (0-based indices of ``alphas_cumprod``, the timesteps the network receives).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from certbench.denoising.schedule import NoiseSchedule, carlini_timestep

SIGMAS = (0.12, 0.25, 0.5, 1.0)


def closed_form_linear_alpha_bar(t: int, steps: int = 1000) -> float:
    """ᾱ at 0-based index t of Ho et al.'s schedule, β_j = 1e-4 + j·(0.02 − 1e-4)/(T − 1):
    exp Σ_{j ≤ t} log(1 − β_j), summed exactly (math.fsum), independent of numpy's cumprod."""
    betas = (1e-4 + j * (0.02 - 1e-4) / (steps - 1) for j in range(t + 1))
    return math.exp(math.fsum(math.log1p(-b) for b in betas))


def released_loop(schedule: NoiseSchedule, sigma: float) -> int:
    """The release's search as written (cifar10/certify.py), on this schedule's arrays."""
    sqrt_alphas_cumprod = np.sqrt(schedule.alphas_cumprod)
    sqrt_one_minus_alphas_cumprod = np.sqrt(1.0 - schedule.alphas_cumprod)
    target_sigma = sigma * 2
    real_sigma = 0
    t = 0
    while real_sigma < target_sigma:
        t += 1
        a = sqrt_alphas_cumprod[t]
        b = sqrt_one_minus_alphas_cumprod[t]
        real_sigma = b / a
    return t


@pytest.mark.parametrize("sigma", SIGMAS)
def test_the_step_on_the_linear_schedule_is_the_released_codes_choice(sigma):
    schedule = NoiseSchedule.named("linear", 1000)
    threshold = 1 / (1 + (2 * sigma) ** 2)
    # the first step whose ᾱ has fallen to the threshold (noise ratio √((1 − ᾱ)/ᾱ) ≥ 2σ)
    expected = next(t for t in range(1, 1000) if closed_form_linear_alpha_bar(t) <= threshold)
    # the same integer in the papers' 1-based notation (ᾱ_t = alphas_cumprod[t − 1]):
    # ᾱ_t ≥ 1/(1 + (2σ)²) > ᾱ_{t+1}
    assert closed_form_linear_alpha_bar(expected - 1) >= threshold
    assert closed_form_linear_alpha_bar(expected) < threshold
    assert schedule.timestep(sigma) == expected == released_loop(schedule, sigma)


RELEASED_STEPS = {
    ("linear", 1000): {0.12: 70, 0.25: 145, 0.5: 259, 1.0: 396},
    ("cosine", 4000): {0.12: 573, 0.25: 1158, 0.5: 1984, 1.0: 2809},
}
"""The release's loop run on its own arrays (``GaussianDiffusion(betas=get_named_beta_schedule(
kind, T))`` of ethz-spylab/diffusion_denoised_smoothing, ``cifar10/improved_diffusion``): the
linear schedule of Ho et al. and the cosine 4,000-step schedule of its CIFAR-10 model
(``cifar10/DRM.py``: ``diffusion_steps=4000``, ``noise_schedule="cosine"``)."""


CASES = [(kind, steps, sigma) for (kind, steps) in RELEASED_STEPS for sigma in SIGMAS]


@pytest.mark.parametrize(("kind", "steps", "sigma"), CASES)
def test_the_step_is_the_one_the_release_picked(kind, steps, sigma):
    schedule = NoiseSchedule.named(kind, steps)
    assert schedule.timestep(sigma) == RELEASED_STEPS[kind, steps][sigma]


@pytest.mark.parametrize("sigma", SIGMAS)
def test_the_step_on_the_cosine_schedule_is_the_released_codes_choice(sigma):
    schedule = NoiseSchedule.named("cosine", 4000)  # the release's CIFAR-10 model: 4,000 steps
    assert carlini_timestep(schedule.alphas_cumprod, sigma) == released_loop(schedule, sigma)


def test_the_linear_schedule_is_ho_et_al():
    betas = NoiseSchedule.named("linear", 1000).betas
    assert betas[0] == 1e-4 and betas[-1] == pytest.approx(0.02, abs=1e-15)
    np.testing.assert_allclose(np.diff(betas), (0.02 - 1e-4) / 999, rtol=1e-9)
    alpha_bar = NoiseSchedule.named("linear", 1000).alphas_cumprod
    for t in (0, 69, 258, 999):
        assert alpha_bar[t] == pytest.approx(closed_form_linear_alpha_bar(t), rel=1e-12)


@pytest.mark.parametrize("steps", [1000, 4000])
def test_the_cosine_schedule_is_nichol_and_dhariwals_closed_form(steps):
    """ᾱ(t) = f(t)/f(0), f(t) = cos²((t/T + s)/(1 + s)·π/2), s = 0.008 (Eq. 17): the product of
    the discretised 1 − β telescopes to it wherever β is not clipped at 0.999 (all but the last
    step)."""
    s = 0.008

    def f(t: float) -> float:
        return math.cos((t / steps + s) / (1 + s) * math.pi / 2) ** 2

    schedule = NoiseSchedule.named("cosine", steps)
    closed = np.array([f(i + 1) / f(0) for i in range(steps)])
    np.testing.assert_allclose(schedule.alphas_cumprod[:-1], closed[:-1], rtol=1e-9, atol=1e-15)
    assert schedule.betas.max() == 0.999 and schedule.betas[-1] == 0.999
    assert (schedule.betas[:-1] < 0.999).all()


def test_a_noise_level_beyond_the_schedule_or_not_positive_is_refused():
    schedule = NoiseSchedule.named("linear", 1000)
    with pytest.raises(ValueError, match="beyond this schedule"):
        schedule.timestep(200.0)
    for sigma in (0.0, -0.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="positive finite"):
            schedule.timestep(sigma)
    with pytest.raises(ValueError, match="unknown β schedule"):
        NoiseSchedule.named("quadratic", 1000)  # type: ignore[arg-type]
