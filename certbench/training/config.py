"""The settings of a training run: what defines the weights, and how to run it.

:class:`TrainConfig` holds everything that determines the trained weights; it is stored in every
checkpoint and in the training log, and a resumed run must match it exactly. :class:`RunOptions`
says how to run (device, precision, workers, evaluation, checkpoint cadence), which changes
speed but not the intended result.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from certbench.augment import AugMixConfig
from certbench.errors import TrainingError
from certbench.nets import check_kwargs
from certbench.training.recipes import get_recipe
from certbench.training.schedule import Schedule
from certbench.training.submission import Normalize

__all__ = ["RunOptions", "TrainConfig"]


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines the trained weights (stored in checkpoints and the log).

    ``batch_size``, ``lbd`` and ``eta`` default to the recipe's values (None = default).
    ``augmix_variant="reference"`` reproduces the AugMix of the release of Sun et al. (ECCV 2022)
    (see :mod:`certbench.augment.aug_mix`). ``sigma`` is the smoothing noise of the manifest; the
    training noise ``train_sigma`` defaults to it (``train_sigma=0`` trains without noise,
    Cohen et al.'s "noise_0.00" models).
    """

    recipe: str
    dataset: str
    arch: str = "cifar_resnet110"
    arch_kwargs: dict[str, Any] = field(default_factory=dict)
    sigma: float = 0.25
    train_sigma: float | None = None
    epochs: int = 200
    batch_size: int | None = None
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 1e-4
    lbd: float | None = None
    eta: float | None = None
    seed: int = 0
    normalize: Normalize = "center"
    config: str | None = None
    revision: str | None = None
    limit: int | None = None
    benchmark: str | None = None
    augmix_variant: Literal["hendrycks", "reference"] = "hendrycks"

    def resolved(self) -> TrainConfig:
        """A copy with the recipe defaults filled in and every field checked."""
        recipe = get_recipe(self.recipe)
        if not self.sigma > 0:
            raise TrainingError(f"sigma must be > 0, got {self.sigma!r}")
        if self.train_sigma is not None and not self.train_sigma >= 0:
            raise TrainingError(f"train_sigma must be >= 0, got {self.train_sigma!r}")
        AugMixConfig(variant=self.augmix_variant)  # validates
        if self.normalize not in ("center", "standardize", "none"):
            raise TrainingError(
                f"normalize must be center, standardize or none, got {self.normalize!r}"
            )
        check_kwargs(self.arch, self.arch_kwargs)
        lbd, eta = recipe.default_weights(self.dataset)
        batch = recipe.batch_size if self.batch_size is None else self.batch_size
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 2:
            raise TrainingError(f"batch_size must be an integer >= 2, got {batch!r}")
        Schedule(self.epochs, self.lr, self.momentum, self.weight_decay)  # validates
        return replace(
            self,
            train_sigma=self.sigma if self.train_sigma is None else self.train_sigma,
            batch_size=batch,
            lbd=lbd if self.lbd is None else self.lbd,
            eta=eta if self.eta is None else self.eta,
        )

    def schedule(self) -> Schedule:
        return Schedule(self.epochs, self.lr, self.momentum, self.weight_decay)


@dataclass(frozen=True)
class RunOptions:
    """How to run (never changes the intended weights; GPU runs are not bitwise reproducible)."""

    device: str | None = None
    amp: Literal["bf16", "auto"] | None = "auto"
    channels_last: bool | None = None
    compile: bool = False
    workers: int | None = None
    augment_device: Literal["cpu", "cuda"] | None = None
    eval_split: str | None = "test"
    eval_limit: int | None = None
    checkpoint_every: int = 1
    resume: bool = False
    deterministic: bool = False
    threads: int | None = None
    progress: bool = True
