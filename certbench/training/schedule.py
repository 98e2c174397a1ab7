"""The optimisation schedule of the CIFAR models of Sun et al., ECCV 2022: SGD, 200 epochs, step
decay.

Sun et al., Appendix D: "We train CIFAR-10/100 ... for 200 ... epochs for all methods with an SGD
optimizer". The release (github.com/jiachens/FourierMix, ``train.py``, ``train_augmix.py``,
``train_fourier.py``) fixes the rest: learning rate 0.1, momentum 0.9, weight decay 1e-4,
batch 256, and for ``cifar_resnet110`` ``MultiStepLR(milestones=[100, 150], gamma=0.1)``.
Milestones are stored as fractions of the run (0.5, 0.75), so a shorter run (``--epochs 10`` on
the demo data) decays at the same points of its schedule.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from certbench.errors import TrainingError

__all__ = ["Schedule", "build_optimizer"]


@dataclass(frozen=True)
class Schedule:
    """SGD hyper-parameters and the epochs at which the learning rate is multiplied by gamma."""

    epochs: int = 200
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 1e-4
    gamma: float = 0.1
    milestones: tuple[float, ...] = (0.5, 0.75)

    def __post_init__(self) -> None:
        if isinstance(self.epochs, bool) or not isinstance(self.epochs, int) or self.epochs < 1:
            raise TrainingError(f"epochs must be an integer >= 1, got {self.epochs!r}")
        if not self.lr > 0:
            raise TrainingError(f"lr must be > 0, got {self.lr!r}")
        if not 0 <= self.momentum < 1 or self.weight_decay < 0 or not 0 < self.gamma <= 1:
            raise TrainingError(
                f"need 0 <= momentum < 1, weight_decay >= 0, 0 < gamma <= 1; got momentum="
                f"{self.momentum}, weight_decay={self.weight_decay}, gamma={self.gamma}"
            )
        if any(not 0 < f < 1 for f in self.milestones):
            raise TrainingError(
                f"milestones are fractions of the run in (0, 1), got {self.milestones}"
            )

    def milestone_epochs(self) -> list[int]:
        """Epochs after which the lr decays: ``round(f·epochs)``, 100 and 150 for 200 epochs."""
        return sorted({max(1, round(f * self.epochs)) for f in self.milestones})


def build_optimizer(
    model: nn.Module, schedule: Schedule
) -> tuple[torch.optim.SGD, torch.optim.lr_scheduler.MultiStepLR]:
    """SGD over all parameters and its per-epoch MultiStepLR, as in the release."""
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=schedule.lr,
        momentum=schedule.momentum,
        weight_decay=schedule.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.MultiStepLR(
        optimizer, milestones=schedule.milestone_epochs(), gamma=schedule.gamma
    )
    return optimizer, scheduler
