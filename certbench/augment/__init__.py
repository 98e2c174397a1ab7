"""Training augmentations with per-image random streams (seeded, batch-size independent).

- :mod:`certbench.augment.crop`: random crop + horizontal flip (Cohen et al.'s base).
- :mod:`certbench.augment.aug_mix`: AugMix (Hendrycks et al., ICLR 2020), CPU, uint8 operations.
- :mod:`certbench.augment.fouriermix`: FourierMix (Sun et al., ECCV 2022), batched, CPU or CUDA.
- :mod:`certbench.augment.affine`: batched affine warps with torchvision's geometry.

Each function takes one seed per image (``RandomStream``); the ``AugMix``/``FourierMix`` classes are
``torchvision.transforms.v2`` transforms for ordinary pipelines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from certbench import public_face

if TYPE_CHECKING:
    from certbench.augment.aug_mix import AugMix, AugMixConfig, augmix
    from certbench.augment.crop import crop_flip
    from certbench.augment.fouriermix import FourierMix, FourierMixConfig, fourier_mix
    from certbench.augment.seeds import RandomStream

__getattr__, __dir__, __all__ = public_face(__name__, __file__)
