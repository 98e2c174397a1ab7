"""Salman et al.'s one-step denoiser: a DnCNN that predicts the noise and subtracts it.

Salman, Sun, Yang, Kapoor & Kolter, "Denoised Smoothing: A Provable Defense for Pretrained
Classifiers", NeurIPS 2020 (arXiv:2003.01908), use the DnCNN of Zhang, Zuo, Chen, Meng & Zhang
("Beyond a Gaussian Denoiser: Residual Learning of Deep CNN for Image Denoising", IEEE TIP 2017)
as written in their release (microsoft/denoised-smoothing, ``code/archs/dncnn.py``):

- a 3×3 convolution with bias and a ReLU; ``depth − 2`` times a 3×3 convolution without bias,
  BatchNorm (``eps=1e-4``, ``momentum=0.95`` as given to PyTorch) and ReLU; a last 3×3
  convolution without bias back to the image's channels, all in ``nn.Sequential`` ``dncnn`` (so
  the state-dict keys read ``dncnn.0.weight`` as in their checkpoints);
- residual: ``forward(x) = x − dncnn(x)``, the network estimates the noise;
- initialisation: orthogonal convolution weights, zero biases, unit/zero BatchNorm, and the last
  convolution's weights zero, so an untrained DnCNN is exactly the identity.

It works on images in [0, 1] (the classifier's normalisation comes after it), the pixels the
smoothing noise is added to; ``cifar_dncnn`` is depth 17 with 64 features.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["BATCHNORM_EPS", "BATCHNORM_MOMENTUM", "DnCNN"]

BATCHNORM_EPS = 1e-4
BATCHNORM_MOMENTUM = 0.95
"""The release's ``nn.BatchNorm2d(n_channels, eps=0.0001, momentum=0.95)``."""


class DnCNN(nn.Module):
    """DnCNN of ``depth`` convolutions with ``features`` channels on ``image_channels`` images."""

    def __init__(self, *, image_channels: int = 3, depth: int = 17, features: int = 64) -> None:
        super().__init__()
        if depth < 3:
            raise ValueError(f"DnCNN depth must be at least 3, got {depth}")
        layers: list[nn.Module] = [
            nn.Conv2d(image_channels, features, kernel_size=3, padding=1, bias=True),
            nn.ReLU(inplace=True),
        ]
        for _ in range(depth - 2):
            layers += [
                nn.Conv2d(features, features, kernel_size=3, padding=1, bias=False),
                nn.BatchNorm2d(features, eps=BATCHNORM_EPS, momentum=BATCHNORM_MOMENTUM),
                nn.ReLU(inplace=True),
            ]
        last = nn.Conv2d(features, image_channels, kernel_size=3, padding=1, bias=False)
        self.dncnn = nn.Sequential(*layers, last)
        self._initialize_weights(last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.dncnn(x)

    def _initialize_weights(self, last: nn.Conv2d) -> None:
        """The release's initialisation; skipped on the ``meta`` device (shapes only)."""
        if any(p.is_meta for p in self.parameters()):
            return
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.orthogonal_(module.weight)
                if module.bias is not None:
                    nn.init.constant_(module.bias, 0)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.constant_(module.weight, 1)
                nn.init.constant_(module.bias, 0)
        nn.init.constant_(last.weight, 0)
