"""Training base classifiers for randomized smoothing with the recipes of Sun et al. (2022).

- :mod:`certbench.training.recipes`: the six recipes (views, noise, loss).
- :mod:`certbench.training.schedule`: SGD and the step schedule of the paper's release.
- :mod:`certbench.training.data`: seeded per-image augmentation, batched DataLoader fetches.
- :mod:`certbench.training.checkpoint`: safetensors + JSON checkpoints (no pickle).
- :mod:`certbench.training.trainer`: :func:`~certbench.training.trainer.train`, the run.
- :mod:`certbench.training.denoiser_recipes`, :mod:`certbench.training.denoiser_trainer`,
  :mod:`certbench.training.denoiser_submission`: denoisers for denoised smoothing (Ho et al.'s
  DDPM, Salman et al.'s MSE objective) and a denoised submission from two runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from certbench import public_face

if TYPE_CHECKING:
    from certbench.training.config import RunOptions, TrainConfig
    from certbench.training.data import TrainBatches, make_views
    from certbench.training.denoiser_recipes import DenoiserTrainConfig
    from certbench.training.denoiser_submission import check_classifier_folder, compose_submission
    from certbench.training.denoiser_trainer import train_denoiser
    from certbench.training.recipes import RECIPES, Recipe, recipe_loss
    from certbench.training.schedule import Schedule, build_optimizer
    from certbench.training.trainer import train

__getattr__, __dir__, __all__ = public_face(__name__, __file__)
