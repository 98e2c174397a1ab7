"""AugMix on uint8 tensors: AugMix's magnitudes, the mixing law, seeding, the two variants."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchvision.transforms import v2

from certbench.augment.aug_mix import OPERATIONS, AugMix, AugMixConfig, augmix
from certbench.augment.crop import crop_flip
from certbench.errors import AugmentationError


@pytest.fixture(autouse=True)
def one_thread():
    """AugMix runs in DataLoader workers, which use one thread; small ops are slower with more."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def images(count: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (count, 3, 32, 32), generator=g, dtype=torch.uint8)


def test_output_is_float_in_unit_interval_and_differs_from_the_input():
    x = images(8)
    out = augmix(x, list(range(8)))
    assert out.dtype == torch.float32 and out.shape == x.shape
    assert out.min() >= 0 and out.max() <= 1
    assert (out - x.float() / 255).abs().amax(dim=(1, 2, 3)).min() > 0


def test_deterministic_and_batched_equals_per_image():
    x = images(6)
    seeds = [3, 1, 4, 1, 5, 9]
    batched = augmix(x, seeds)
    assert torch.equal(batched, augmix(x, seeds))
    assert torch.equal(batched, torch.cat([augmix(x[i : i + 1], [s]) for i, s in enumerate(seeds)]))
    assert not torch.equal(batched[0], augmix(x[:1], [2])[0])


def test_mixture_of_identical_chains_is_the_image(monkeypatch):
    """With every operation the identity, a convex mixture of the chains must return x."""
    for name in OPERATIONS:
        monkeypatch.setitem(OPERATIONS, name, lambda img, level, rng: img)
    x = images(4)
    torch.testing.assert_close(augmix(x, [0, 1, 2, 3]), x.float() / 255, rtol=0, atol=1e-6)


def test_mixture_weight_of_the_chains_is_one_beta_draw_in_the_unit_interval(monkeypatch):
    """Chains that all give white: x_augmix = (1 - m)·x + m·1 with one m ∈ [0, 1] per image."""
    for name in OPERATIONS:
        monkeypatch.setitem(OPERATIONS, name, lambda img, level, rng: torch.full_like(img, 255))
    x = images(16)
    clean = x.float() / 255
    out = augmix(x, list(range(16)))
    m = ((out - clean) / (1 - clean).clamp(min=1e-3)).flatten(1)
    keep = (1 - clean).flatten(1) > 0.1
    per_image = torch.stack([m[i][keep[i]].mean() for i in range(16)])
    spread = torch.stack([(m[i][keep[i]] - per_image[i]).abs().max() for i in range(16)])
    assert spread.max() < 1e-4 and per_image.min() >= 0 and per_image.max() <= 1
    assert per_image.std() > 0.05  # Beta(1, 1) draws, not a constant


@pytest.mark.parametrize("level", [0.1, 1.0, 2.6, 3.0])
def test_posterize_keeps_augmix_bit_count(level):
    x = images(1)[0]
    bits = 4 - int(level * 4 / 10)
    out = OPERATIONS["posterize"](x, level, np.random.default_rng(0))
    assert torch.all(out % (2 ** (8 - bits)) == 0)
    assert torch.equal(out, x & (0xFF << (8 - bits) & 0xFF))


@pytest.mark.parametrize("level", [0.5, 2.0, 3.0])
def test_solarize_inverts_pixels_above_augmix_threshold(level):
    x = torch.arange(256, dtype=torch.uint8).view(1, 16, 16).expand(3, 16, 16).contiguous()
    threshold = 256 - int(level * 256 / 10)
    out = OPERATIONS["solarize"](x, level, np.random.default_rng(0))
    expected = torch.where(x >= threshold, 255 - x, x)
    assert torch.equal(out, expected)


def test_translate_moves_by_augmix_integer_pixels():
    x = torch.zeros(3, 32, 32, dtype=torch.uint8)
    x[:, 16, 16] = 255
    level = 2.9  # int(2.9 * (32 / 3) / 10) = 3 pixels
    out = OPERATIONS["translate_x"](x, level, np.random.default_rng(0))
    (row, col) = torch.nonzero(out[0] == 255)[0].tolist()
    assert row == 16 and abs(col - 16) == int(level * (32 / 3) / 10)


def test_reference_variant_differs_from_hendrycks_for_the_same_seed():
    x = images(4)
    default = augmix(x, [0, 1, 2, 3])
    reference = augmix(x, [0, 1, 2, 3], AugMixConfig(variant="reference"))
    assert reference.min() >= 0 and reference.max() <= 1
    assert not torch.equal(default, reference)


def test_v2_transform_accepts_uint8_and_float_and_is_seeded():
    x = images(2)
    a = v2.Compose([AugMix(seed=3)])(x)
    b = AugMix(seed=3)(x.float() / 255)
    assert a.dtype == torch.float32 and torch.equal(a, b)
    assert AugMix(seed=3)(x[0]).shape == x[0].shape


@pytest.mark.parametrize(
    ("kwargs", "phrase"),
    [
        ({"severity": 0}, "severity"),
        ({"width": 0}, "width"),
        ({"depth": 0}, "depth"),
        ({"alpha": -1.0}, "alpha"),
        ({"variant": "torchvision"}, "variant"),
    ],
)
def test_bad_configuration_is_refused(kwargs, phrase):
    with pytest.raises(AugmentationError, match=phrase):
        AugMixConfig(**kwargs)


def test_float_batch_is_refused_with_the_conversion():
    with pytest.raises(AugmentationError, match="uint8"):
        augmix(torch.zeros(1, 3, 32, 32), [0])


def test_crop_flip_is_a_seeded_padded_crop_and_flip():
    x = images(16, seed=4)
    out = crop_flip(x, list(range(16)))
    assert torch.equal(out, crop_flip(x, list(range(16))))
    assert torch.equal(out, torch.cat([crop_flip(x[i : i + 1], [i]) for i in range(16)]))
    padded = torch.nn.functional.pad(x, (4, 4, 4, 4))
    for i in range(16):
        windows = [
            padded[i, :, top : top + 32, left : left + 32] for top in range(9) for left in range(9)
        ]
        candidates = windows + [w.flip(-1) for w in windows]
        assert any(torch.equal(out[i], c) for c in candidates)
    assert not torch.equal(out, x)
