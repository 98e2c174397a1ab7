"""Batched affine warps with torchvision's ``RandomAffine`` geometry, one matrix per image.

FourierMix mixes each Fourier-augmented image with an affine transform of the original
(Algorithm 1 line 10 of Sun et al., ECCV 2022). The released code
(github.com/jiachens/FourierMix, ``code/fourier_augment.py``) draws those transforms with
``torchvision.transforms.RandomAffine`` one image at a time. Here every image of a batch gets its
own rotation / integer translation / x-shear in one ``grid_sample`` call, with the conventions
of ``torchvision.transforms.v2.functional.affine`` on tensors: rotation about the image centre
(angle as that function takes it), shear in degrees, translation in pixels, nearest
interpolation and zero fill (RandomAffine's defaults), pixel centres at half-integer offsets
from the centre and ``align_corners=False`` sampling. A test checks image-by-image equality
with torchvision.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["affine_batch", "inverse_affine_matrices"]


def inverse_affine_matrices(
    angle: torch.Tensor, tx: torch.Tensor, ty: torch.Tensor, shear_x: torch.Tensor
) -> torch.Tensor:
    """Output→input maps ``(B, 2, 3)`` in pixel units about the image centre.

    The forward map is ``p_out = A · p_in + t`` with ``A`` torchvision's rotation-shear matrix for
    rotation ``angle`` and x-shear ``shear_x`` (degrees, scale 1); its determinant is 1, so the
    inverse is the adjugate. Why closed form: it keeps float32 results bit-identical to
    torchvision's own matrix for the same parameters.
    """
    rot = torch.deg2rad(angle.to(torch.float64))
    sx = torch.deg2rad(shear_x.to(torch.float64))
    # torchvision's RSS matrix with y-shear 0: [[a, b], [c, d]].
    a = torch.cos(rot)
    b = -torch.cos(rot) * torch.tan(sx) - torch.sin(rot)
    c = torch.sin(rot)
    d = -torch.sin(rot) * torch.tan(sx) + torch.cos(rot)
    tx64, ty64 = tx.to(torch.float64), ty.to(torch.float64)
    inverse = torch.stack(
        [
            torch.stack([d, -b, -d * tx64 + b * ty64], dim=-1),
            torch.stack([-c, a, c * tx64 - a * ty64], dim=-1),
        ],
        dim=-2,
    )
    return inverse.to(torch.float32)


def affine_batch(
    images: torch.Tensor,
    angle: torch.Tensor,
    tx: torch.Tensor,
    ty: torch.Tensor,
    shear_x: torch.Tensor,
) -> torch.Tensor:
    """Warp float images ``(B, C, H, W)``: image ``i`` by its own (angle, tx, ty, shear_x).

    Parameters are ``(B,)`` tensors (degrees, pixels, pixels, degrees). Nearest interpolation,
    pixels that come from outside the image are 0.
    """
    b, _, h, w = images.shape
    theta = inverse_affine_matrices(angle, tx, ty, shear_x).to(images.device)
    xs = torch.linspace(-w * 0.5 + 0.5, w * 0.5 - 0.5, w, device=images.device)
    ys = torch.linspace(-h * 0.5 + 0.5, h * 0.5 - 0.5, h, device=images.device)
    base = torch.ones((1, h, w, 3), device=images.device, dtype=torch.float32)
    base[..., 0] = xs
    base[..., 1] = ys[:, None]
    scale = torch.tensor([0.5 * w, 0.5 * h], device=images.device, dtype=torch.float32)
    # (B, 3, 2): the transposed output→input map, divided by the half sizes -> normalised coords.
    rescaled = theta.transpose(1, 2) / scale
    grid = base.view(1, h * w, 3).expand(b, -1, -1).bmm(rescaled).view(b, h, w, 2)
    sampled = F.grid_sample(
        images.to(torch.float32), grid, mode="nearest", padding_mode="zeros", align_corners=False
    )
    return sampled.to(images.dtype)
