"""Training recipes of denoisers for denoised smoothing: what is learned, from which noise, how.

| recipe       | network             | objective                              | optimiser          |
|--------------|---------------------|----------------------------------------|--------------------|
| ddpm         | ``UNet2DModel`` (ε) | E‖ε − ε_θ(√ᾱ_t x₀ + √(1 − ᾱ_t) ε, t)‖² | Adam 2·10⁻⁴, 128   |
| denoiser-mse | DnCNN               | E‖D(x + δ) − x‖², δ ~ N(0, σ²I)        | Adam 10⁻³, 256     |

``ddpm``: Ho, Jain & Abbeel, NeurIPS 2020 (arXiv:2006.11239), Algorithm 1 (L_simple): images
scaled to [−1, 1] (x₀ = 2x − 1), t uniform over the schedule's steps (0-based, as diffusers'
``DDPMScheduler.add_noise`` and improved-diffusion index them), ε ~ N(0, I), the mean squared
error of the predicted noise. Appendix B: Adam at 2·10⁻⁴ (CIFAR-10), batch 128, a linear warm-up
over 5,000 steps, gradients clipped to norm 1 (their ``diffusion_tf/diffusion_utils_2.py``
release, ``grad_clip=1.``); dropout is the U-Net's own (0.1 in DDPM's CIFAR-10 configuration).
A run shorter than ten warm-ups warms up over its first tenth. Not done: the exponential moving
average of the weights (decay 0.9999) Ho et al. sample from, which over a CPU demo's few hundred
steps would stay at the initial weights; a U-Net with learned variance (``out_channels = 2·C``)
is refused, since its variance needs improved-diffusion's hybrid loss, not L_simple.

``denoiser-mse``: Salman, Sun, Yang, Kapoor & Kolter, NeurIPS 2020 (arXiv:2003.01908), §3.2,
the "MSE objective" L_MSE = E‖D_θ(x + δ) − x‖²₂ with the smoothing noise δ ~ N(0, σ²I) on [0, 1]
pixels, as in their release (microsoft/denoised-smoothing, ``code/train_denoiser.py``:
``MSELoss(reduction='mean')`` of ``denoiser(inputs + noise)`` and ``inputs``, Adam with learning
rate 10⁻³ and weight decay 10⁻⁴, batch 256, ``StepLR(step_size=30, gamma=0.1)`` over 90 epochs:
the rate drops ×0.1 after a third and two thirds of the run).

Images come as for the classifier recipes (:class:`certbench.training.data.TrainBatches` with
Cohen et al.'s random crop and flip, per-image seeds); the noise (and DDPM's steps) of step s of
epoch e are drawn from ``derive_seed(seed, "noise", e, s)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from certbench.augment import RandomStream
from certbench.denoising import (
    DENOISER_PRESETS,
    DiffusionDenoiser,
    DiffusionDenoiserConfig,
    DnCNNConfig,
    parse_denoiser_config,
)
from certbench.errors import TrainingError

__all__ = [
    "DENOISER_RECIPES",
    "DenoiserRecipe",
    "DenoiserTrainConfig",
    "ddpm_loss",
    "get_denoiser_recipe",
    "mse_loss",
]

HO_URL = "https://arxiv.org/abs/2006.11239"
SALMAN_URL = "https://arxiv.org/abs/2003.01908"

Loss = Callable[[nn.Module, torch.Tensor, RandomStream, float], torch.Tensor]


def ddpm_loss(
    denoiser: nn.Module, clean: torch.Tensor, stream: RandomStream, sigma: float
) -> torch.Tensor:
    """Ho et al.'s L_simple for the U-Net of ``denoiser`` (a DiffusionDenoiser) on images in
    [0, 1]; ``sigma`` plays no part (a DDPM learns every noise level)."""
    if not isinstance(denoiser, DiffusionDenoiser):
        raise TrainingError("the ddpm recipe trains a diffusion denoiser's U-Net")
    schedule = denoiser.schedule
    x_start = clean * 2 - 1
    steps = (stream.uniform((clean.shape[0],)) * schedule.steps).long()
    steps = steps.clamp_(max=schedule.steps - 1).to(clean.device)
    noise = stream.normal(clean.shape).to(clean.device, clean.dtype)
    # float64 products, used in float32: improved-diffusion's ``_extract_into_tensor``
    alpha_bar = torch.from_numpy(schedule.alphas_cumprod).to(clean.device)[steps]
    scale = alpha_bar.sqrt().float().view(-1, 1, 1, 1)
    spread = (1 - alpha_bar).sqrt().float().view(-1, 1, 1, 1)
    x_t = scale * x_start + spread * noise
    output = denoiser.unet(x_t, steps)
    predicted = getattr(output, "sample", output)
    return F.mse_loss(predicted.float(), noise)


def mse_loss(
    denoiser: nn.Module, clean: torch.Tensor, stream: RandomStream, sigma: float
) -> torch.Tensor:
    """Salman et al.'s L_MSE: mean of (D(x + δ) − x)², δ ~ N(0, σ²I), images in [0, 1]."""
    noise = stream.normal(clean.shape).to(clean.device, clean.dtype)
    return F.mse_loss(denoiser(clean + sigma * noise).float(), clean)


@dataclass(frozen=True)
class DenoiserRecipe:
    """One denoiser recipe: the network kind it trains, its loss and its optimiser settings."""

    name: str
    title: str
    kind: Literal["diffusion", "dncnn"]
    default_denoiser: str
    loss: Loss
    batch_size: int
    lr: float
    weight_decay: float
    warmup_steps: int
    grad_clip: float | None
    milestones: tuple[float, ...]
    paper_url: str
    code_url: str


DENOISER_RECIPES: dict[str, DenoiserRecipe] = {
    "ddpm": DenoiserRecipe(
        "ddpm", "DDPM ε-prediction", "diffusion", "ddpm-cifar10-32", ddpm_loss,
        batch_size=128, lr=2e-4, weight_decay=0.0, warmup_steps=5000, grad_clip=1.0,
        milestones=(), paper_url=HO_URL, code_url="https://github.com/hojonathanho/diffusion",
    ),
    "denoiser-mse": DenoiserRecipe(
        "denoiser-mse", "Denoiser, MSE objective", "dncnn", "dncnn", mse_loss,
        batch_size=256, lr=1e-3, weight_decay=1e-4, warmup_steps=0, grad_clip=None,
        milestones=(1 / 3, 2 / 3), paper_url=SALMAN_URL,
        code_url="https://github.com/microsoft/denoised-smoothing",
    ),
}  # fmt: skip


def get_denoiser_recipe(name: str) -> DenoiserRecipe:
    """The denoiser recipe ``name``; TrainingError listing the known ones."""
    try:
        return DENOISER_RECIPES[name]
    except KeyError:
        raise TrainingError(
            f"unknown denoiser recipe {name!r}; choose one of: {', '.join(DENOISER_RECIPES)}"
        ) from None


@dataclass(frozen=True)
class DenoiserTrainConfig:
    """Everything that defines a trained denoiser (stored in checkpoints and the log).

    ``denoiser`` is a configuration block (:data:`certbench.denoising.DenoiserConfig` as JSON)
    or the name of a preset (:data:`certbench.denoising.DENOISER_PRESETS`); empty: the recipe's
    default (DDPM's CIFAR-10 U-Net, Salman et al.'s ``cifar_dncnn``). ``sigma`` is the smoothing
    noise the denoiser is for: denoiser-mse trains at it; a DDPM learns every level and σ only
    picks the step of its evaluation. ``batch_size``, ``lr``, ``weight_decay`` and
    ``warmup_steps`` default to the recipe's (None).
    """

    recipe: str
    dataset: str
    denoiser: dict[str, Any] | str = field(default_factory=dict)
    sigma: float = 0.25
    epochs: int = 10
    batch_size: int | None = None
    lr: float | None = None
    weight_decay: float | None = None
    warmup_steps: int | None = None
    seed: int = 0
    config: str | None = None
    revision: str | None = None
    limit: int | None = None
    benchmark: str | None = None

    def resolved(self) -> DenoiserTrainConfig:
        """A copy with the recipe's defaults filled in, the denoiser block validated and
        written out in full; TrainingError (or DenoiserConfigError) naming what is wrong."""
        recipe = get_denoiser_recipe(self.recipe)
        denoiser = self.denoiser_config()
        if denoiser.kind != recipe.kind:
            raise TrainingError(
                f"recipe {recipe.name!r} trains a {recipe.kind!r} denoiser, the configuration "
                f"is {denoiser.kind!r}"
            )
        if isinstance(denoiser, DiffusionDenoiserConfig):
            unet = denoiser.unet
            if unet.out_channels != unet.in_channels:
                raise TrainingError(
                    "the ddpm recipe trains ε-prediction (Ho et al.'s L_simple); a U-Net with "
                    f"learned variance (out_channels={unet.out_channels}) needs improved-"
                    "diffusion's hybrid loss; set out_channels to in_channels"
                )
        values = {
            "batch_size": (self.batch_size, recipe.batch_size),
            "lr": (self.lr, recipe.lr),
            "weight_decay": (self.weight_decay, recipe.weight_decay),
            "warmup_steps": (self.warmup_steps, recipe.warmup_steps),
        }
        chosen = {name: default if given is None else given for name, (given, default) in
                  values.items()}  # fmt: skip
        _check_numbers(self, chosen)
        return DenoiserTrainConfig(
            **{**self.__dict__, **chosen, "denoiser": denoiser.model_dump(mode="json")}
        )

    def denoiser_config(self) -> DiffusionDenoiserConfig | DnCNNConfig:
        """The validated denoiser configuration (a preset, a block or the recipe's default)."""
        block = self.denoiser or get_denoiser_recipe(self.recipe).default_denoiser
        if isinstance(block, str):
            try:
                return DENOISER_PRESETS[block]
            except KeyError:
                raise TrainingError(
                    f"unknown denoiser preset {block!r}; choose one of: "
                    f"{', '.join(DENOISER_PRESETS)}, or give a JSON configuration"
                ) from None
        return parse_denoiser_config(block)


def _check_numbers(cfg: DenoiserTrainConfig, chosen: dict[str, Any]) -> None:
    if not cfg.sigma > 0:
        raise TrainingError(f"sigma must be > 0, got {cfg.sigma!r}")
    if isinstance(cfg.epochs, bool) or not isinstance(cfg.epochs, int) or cfg.epochs < 1:
        raise TrainingError(f"epochs must be an integer >= 1, got {cfg.epochs!r}")
    batch = chosen["batch_size"]
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise TrainingError(f"batch_size must be an integer >= 1, got {batch!r}")
    if not chosen["lr"] > 0 or not chosen["weight_decay"] >= 0 or chosen["warmup_steps"] < 0:
        raise TrainingError(
            f"need lr > 0, weight_decay >= 0, warmup_steps >= 0; got lr={chosen['lr']}, "
            f"weight_decay={chosen['weight_decay']}, warmup_steps={chosen['warmup_steps']}"
        )
