"""Training augmentations with per-image random streams (seeded, batch-size independent).

- :mod:`certbench.augment.crop_flip`: random crop + horizontal flip (Cohen et al.'s base).
- :mod:`certbench.augment.augmix`: AugMix (Hendrycks et al., ICLR 2020), CPU, uint8 operations.
- :mod:`certbench.augment.fouriermix`: FourierMix (Sun et al., ECCV 2022), batched, CPU or CUDA.
- :mod:`certbench.augment.affine`: batched affine warps with torchvision's geometry.

Each function takes one seed per image; the ``AugMix``/``FourierMix`` classes are
``torchvision.transforms.v2`` transforms for ordinary pipelines.
"""

from certbench.augment.augmix import AugMix, AugMixConfig, augmix
from certbench.augment.crop_flip import crop_flip
from certbench.augment.fouriermix import FourierMix, FourierMixConfig, fourier_mix

__all__ = [
    "AugMix",
    "AugMixConfig",
    "FourierMix",
    "FourierMixConfig",
    "augmix",
    "crop_flip",
    "fourier_mix",
]
