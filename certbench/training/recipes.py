"""The training recipes of the Table 1 baselines of Sun et al., ECCV 2022: views, noise and loss
of each.

| recipe         | views of each image     | Gaussian noise          | loss                     |
|----------------|-------------------------|-------------------------|--------------------------|
| gaussian       | x                       | every input             | CE (Cohen et al. 2019)   |
| gaussian-jsd   | x                       | m = 2 copies of each    | CE + Jeong & Shin (2020) |
| augmix-jsd     | x, AugMix(x) ×2         | half of the inputs      | CE(view 0) + 12·JSD      |
| augmix-hcr     | x, AugMix(x) ×2         | s = 2 copies of each    | CE + HCR (Eq. 4)         |
| fouriermix-jsd | x, FourierMix(x) ×2     | half of the inputs      | CE(view 0) + 12·JSD      |
| fouriermix-hcr | x, FourierMix(x) ×2     | s = 2 copies of each    | CE + HCR (Eq. 4)         |

Sun et al. §4: "We follow Cohen et al. and Jeong et al. to train the Gaussian and Gaussian+JSD
baseline models, respectively. For other augmentation methods, we apply Gaussian noise
N(0, σ²I) to half of the training samples in the mini-batch ... and we follow Hendrycks et al. to
apply JSD". HCR draws s noise samples for every view by definition (Eq. 4).

"Half of the inputs": the release picks ``len/2`` indices of the concatenated 3B views *with*
replacement (``np.random.choice``), so about 39 % of the inputs get noise; we give each input
noise with probability 1/2 (half in expectation), drawn from the step's noise stream.

Images per SGD step (``batch_size``): 256 distinct images for every recipe (Cohen et al.'s and
Sun et al.'s ``--batch 256``), except ``gaussian-jsd`` with 128: Jeong & Shin split each 256-image
loader batch into m = 2 chunks and take one step per chunk of 128 images × 2 noise copies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from certbench.augment import RandomStream
from certbench.errors import TrainingError
from certbench.training.consistency import (
    HCR_ETA,
    JEONG_SHIN_ETA,
    JEONG_SHIN_LAMBDA,
    JSD_WEIGHT,
    gaussian_consistency,
    hcr_lambda,
    hierarchical_consistency,
    jensen_shannon,
)

__all__ = ["RECIPES", "Recipe", "StepResult", "get_recipe", "recipe_loss"]

Views = Literal["none", "augmix", "fouriermix"]
Consistency = Literal["none", "gaussian", "jsd", "hcr"]

COHEN_URL = "https://arxiv.org/abs/1902.02918"
JEONG_SHIN_URL = "https://arxiv.org/abs/2006.04062"
SUN_URL = "https://www.ecva.net/papers/eccv_2022/papers_ECCV/html/3225_ECCV_2022_paper.php"


@dataclass(frozen=True)
class Recipe:
    """One training recipe: how views are made, where noise goes, which consistency loss."""

    name: str
    title: str
    views: Views
    consistency: Consistency
    noise_samples: int
    half_noise: bool
    batch_size: int
    paper_url: str
    code_url: str

    @property
    def num_views(self) -> int:
        """Views per image: the original, plus two augmented ones for AugMix/FourierMix."""
        return 1 if self.views == "none" else 3

    def default_weights(self, dataset: str) -> tuple[float | None, float | None]:
        """``(λ, η)`` of the recipe's consistency term (None where the term has no such weight)."""
        if self.consistency == "gaussian":
            return JEONG_SHIN_LAMBDA, JEONG_SHIN_ETA
        if self.consistency == "jsd":
            return JSD_WEIGHT, None
        if self.consistency == "hcr":
            return hcr_lambda(dataset), HCR_ETA
        return None, None


def _recipe(
    name: str, title: str, views: Views, consistency: Consistency, paper: str, code: str
) -> Recipe:
    samples = 2 if consistency in ("gaussian", "hcr") else 1
    half = views != "none" and consistency == "jsd"
    batch = 128 if consistency == "gaussian" else 256
    return Recipe(name, title, views, consistency, samples, half, batch, paper, code)


_SUN_CODE = "https://github.com/jiachens/FourierMix"
RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        _recipe(
            "gaussian",
            "Gaussian augmentation",
            "none",
            "none",
            COHEN_URL,
            "https://github.com/locuslab/smoothing",
        ),
        _recipe(
            "gaussian-jsd",
            "Gaussian + consistency",
            "none",
            "gaussian",
            JEONG_SHIN_URL,
            "https://github.com/jh-jeong/smoothing-consistency",
        ),
        _recipe("augmix-jsd", "AugMix + JSD", "augmix", "jsd", SUN_URL, _SUN_CODE),
        _recipe("augmix-hcr", "AugMix + HCR", "augmix", "hcr", SUN_URL, _SUN_CODE),
        _recipe("fouriermix-jsd", "FourierMix + JSD", "fouriermix", "jsd", SUN_URL, _SUN_CODE),
        _recipe("fouriermix-hcr", "FourierMix + HCR", "fouriermix", "hcr", SUN_URL, _SUN_CODE),
    )
}


def get_recipe(name: str) -> Recipe:
    """The recipe called ``name``; raises TrainingError listing the known ones."""
    try:
        return RECIPES[name]
    except KeyError:
        raise TrainingError(
            f"unknown recipe {name!r}; choose one of: {', '.join(RECIPES)}"
        ) from None


@dataclass(frozen=True)
class StepResult:
    """Loss of one step and the number of correct predictions on view 0's first noisy copy."""

    loss: torch.Tensor
    correct: torch.Tensor


def recipe_loss(
    recipe: Recipe,
    forward: Callable[[torch.Tensor], torch.Tensor],
    views: torch.Tensor,
    labels: torch.Tensor,
    *,
    sigma: float,
    stream: RandomStream,
    lbd: float | None,
    eta: float | None,
) -> StepResult:
    """The recipe's training loss on ``views`` ``(B, V, C, H, W)`` (float, [0, 1], on device).

    Noise (and the half-noise choice) is drawn from ``stream`` (on the views' device); all
    inputs of a step go through ``forward`` in one batch, in view-major order.
    """
    b, v = views.shape[:2]
    if v != recipe.num_views:
        raise TrainingError(
            f"recipe {recipe.name!r} needs {recipe.num_views} view(s) per image, got {v}"
        )
    per_view = views.transpose(0, 1)  # (V, B, C, H, W)
    s = recipe.noise_samples
    inputs = per_view[:, None].expand(v, s, *per_view.shape[1:])
    noise = stream.normal(inputs.shape).to(views.device, views.dtype)
    if recipe.half_noise:
        keep = stream.uniform((v, s, b)).to(views.device) < 0.5
        noise = noise * keep[..., None, None, None].to(noise.dtype)
    noisy = (inputs + sigma * noise).reshape(-1, *views.shape[2:])
    logits = forward(noisy).float().view(v, s, b, -1)
    first = logits[0]
    ce = torch.stack([F.cross_entropy(first[i], labels) for i in range(s)]).mean()
    if recipe.consistency == "gaussian":
        loss = ce + gaussian_consistency(first, lbd=_need(lbd, "λ"), eta=_need(eta, "η"))
    elif recipe.consistency == "jsd":
        loss = ce + _need(lbd, "λ") * jensen_shannon(logits[:, 0])
    elif recipe.consistency == "hcr":
        loss = ce + hierarchical_consistency(logits, lbd=_need(lbd, "λ"), eta=_need(eta, "η"))
    else:
        loss = ce
    correct = (first[0].argmax(dim=-1) == labels).sum()
    return StepResult(loss, correct)


def _need(value: float | None, name: str) -> float:
    if value is None:
        raise TrainingError(f"the consistency weight {name} is missing; pass it explicitly")
    return value
