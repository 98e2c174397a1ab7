"""Denoised smoothing: a denoiser in front of a classifier, certified as one base classifier.

Salman et al. (NeurIPS 2020, arXiv:2003.01908) put a one-step denoiser in front of an off-the-shelf
classifier; Carlini et al. (ICLR 2023, arXiv:2206.10550) use one step of a diffusion model.

- :mod:`~certbench.denoising.schedule`: β schedules (linear, cosine) and Carlini et al.'s step;
- :mod:`~certbench.denoising.config`: the allow-listed configurations a manifest may give
  (torch-free);
- :mod:`~certbench.denoising.diffusion`: one-shot denoising with ``diffusers``' ``UNet2DModel``;
- :mod:`~certbench.denoising.dncnn`: Salman et al.'s DnCNN;
- :mod:`~certbench.denoising.composed`: :class:`DenoisedClassifier`, what every stage certifies;
- :mod:`~certbench.denoising.loading`: a denoiser's part of a submission's safetensors file.

Ground floor, below ``certbench.nets`` (which composes a manifest's denoiser with its classifier,
``certbench.nets.denoised``): imports no other certbench package. Public face: ``__all__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from certbench import public_face

if TYPE_CHECKING:
    from certbench.denoising.composed import (
        CLASSIFIER_PREFIX,
        DENOISER_PREFIX,
        DenoisedClassifier,
        build_denoiser,
    )
    from certbench.denoising.config import (
        DDPM_CIFAR10_UNET,
        DENOISER_FILTERS,
        DENOISER_PRESETS,
        LABEL_SEPARATOR,
        DenoiserConfig,
        DenoiserConfigError,
        DiffusionDenoiserConfig,
        DnCNNConfig,
        ManifestDenoiser,
        UNetConfig,
        check_denoiser,
        composition_label,
        denoiser_of,
        parse_denoiser_config,
    )
    from certbench.denoising.diffusion import DiffusionDenoiser, build_unet, noise_prediction
    from certbench.denoising.dncnn import DnCNN
    from certbench.denoising.loading import denoiser_shapes, load_denoiser, split_weights
    from certbench.denoising.schedule import NoiseSchedule, carlini_timestep

__getattr__, __dir__, __all__ = public_face(__name__, __file__)
