"""Denoised smoothing's base classifier: a denoiser in front of a classifier, one ``nn.Module``.

Salman et al. (NeurIPS 2020, arXiv:2003.01908) smooth f ∘ D, a denoiser D in front of an
off-the-shelf classifier f; Carlini et al. (ICLR 2023, arXiv:2206.10550) take a diffusion model's
one-shot denoising as D. Randomized smoothing needs nothing more than a base classifier, so the
composition is certified, attacked and measured by every stage exactly as a plain classifier:
it takes the noisy image ``x + δ`` in [0, 1] pixels (as ``certbench.smoothing`` hands it to any
model) and returns logits. The denoiser works on those [0, 1] pixels and the classifier's own
first layer (``NormalizeLayer``, :func:`certbench.nets.build_classifier`) normalises the
denoised image, so the denoiser always runs before the classifier's normalisation.

Both parts are row-wise in eval mode (GroupNorm, attention and BatchNorm with frozen statistics
act per image), so the composition keeps the engine's batch invariance
(``certbench.nets.batch_invariance``): near ties are re-evaluated at their fixed slot like any
model's. State-dict keys read ``denoiser.*`` and ``classifier.*``; with ``nn.Identity`` as the
denoiser the outputs are the classifier's, bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from certbench.denoising.config import DiffusionDenoiserConfig, DnCNNConfig, check_denoiser
from certbench.denoising.diffusion import DiffusionDenoiser, build_unet
from certbench.denoising.dncnn import DnCNN
from certbench.denoising.schedule import NoiseSchedule

__all__ = ["CLASSIFIER_PREFIX", "DENOISER_PREFIX", "DenoisedClassifier", "build_denoiser"]

DENOISER_PREFIX = "denoiser."
CLASSIFIER_PREFIX = "classifier."
"""Prefixes of the two parts' tensors in a denoised submission's one safetensors file."""


class DenoisedClassifier(nn.Module):
    """``classifier(denoiser(x))`` for noisy images ``x`` in [0, 1] pixels."""

    def __init__(self, denoiser: nn.Module, classifier: nn.Module) -> None:
        super().__init__()
        self.denoiser = denoiser
        self.classifier = classifier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.denoiser(x))


def build_denoiser(
    config: DiffusionDenoiserConfig | DnCNNConfig,
    *,
    sigma: float,
    input_size: Sequence[int],
) -> nn.Module:
    """The denoiser ``config`` describes, randomly initialised, for images of ``input_size``
    ``(C, H, W)`` smoothed at ``sigma`` (the diffusion denoiser's step depends on it).

    Raises DenoiserConfigError when the configuration does not fit the images (channels, a
    U-Net's sample size) or σ is beyond the β schedule.
    """
    check_denoiser(config, input_size=input_size, sigma=sigma)
    if isinstance(config, DnCNNConfig):
        channels = int(input_size[0])
        return DnCNN(image_channels=channels, depth=config.depth, features=config.features)
    schedule = NoiseSchedule.named(config.beta_schedule, config.num_train_timesteps)
    return DiffusionDenoiser(build_unet(config.unet), schedule, sigma)
