"""Random streams: 64-bit block seeds are used in full on CPU; no two of 400,000 blocks match."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from certbench.errors import CertificationError
from certbench.pd.apgd import random_start
from certbench.smoothing.core import certify
from certbench.smoothing.sampling import ESTIMATE, NOISE_BLOCK, SELECT, noise_block_seeds
from certbench.smoothing.streams import (
    derive_seed,
    derive_seeds,
    mt_state_words,
    normal_blocks,
    parse_seed,
    seeded_generator,
)

MASK64 = (1 << 64) - 1


def splitmix64_reference(seed: int, count: int) -> list[int]:
    """Vigna's SplitMix64 in plain Python integers: state += γ; mix the state."""
    out, state = [], seed
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        out.append(z ^ (z >> 31))
    return out


@pytest.mark.parametrize(
    "seed,keys",
    [(0, (5, 1)), ((1 << 127) | 5, ("fog_s5/test", 3)), (2**200 + 3, (2**40, 2)), (3, ())],
)
def test_vectorised_derive_seeds_equal_seedsequence(seed, keys):
    last = np.array([0, 1, 2, 399, 2**32 - 1], dtype=np.uint64)
    expected = [derive_seed(seed, *keys, int(k)) for k in last]
    assert derive_seeds(seed, *keys, last=last).tolist() == expected


def test_cpu_state_words_follow_the_documented_splitmix64_definition():
    seed = 0xDEADBEEF_01234567
    halves = [h for z in splitmix64_reference(seed, 312) for h in (z & 0xFFFFFFFF, z >> 32)]
    assert mt_state_words(seed)[0].tolist() == [0x80000000, *halves[:623]]
    rows = mt_state_words(np.array([seed, 7], dtype=np.uint64))
    assert rows.shape == (2, 624) and rows[0].tolist() == mt_state_words(seed)[0].tolist()


def test_seeds_sharing_their_low_32_bits_give_different_cpu_streams():
    low = 0x1234_5678
    a, b = (1 << 32) | low, (2 << 32) | low
    # control: torch's manual_seed keeps 32 bits on CPU, so it cannot tell a from b
    same_a = torch.randn(8, generator=torch.Generator().manual_seed(a))
    same_b = torch.randn(8, generator=torch.Generator().manual_seed(b))
    assert torch.equal(same_a, same_b)
    ours_a = torch.randn(8, generator=seeded_generator(a))
    ours_b = torch.randn(8, generator=seeded_generator(b))
    assert not torch.equal(ours_a, ours_b)
    assert torch.equal(ours_a, torch.randn(8, generator=seeded_generator(a)))
    assert seeded_generator(a).initial_seed() == a


def test_attack_random_starts_use_all_64_bits():
    low = 99
    starts = random_start((3, 4, 4), 8 / 255, [low, (5 << 32) | low], torch.device("cpu"))
    assert not torch.equal(starts[0], starts[1])
    assert float(starts.abs().amax()) == pytest.approx(8 / 255)


class Recorder(nn.Module):
    """Keeps every input it sees; two classes so certify accepts its logits. ``tied``: both
    logits equal, so every sample is a near tie the engine settles again in fixed-shape chunks
    (padded with zero rows); otherwise a clear margin, so each sample is classified once."""

    def __init__(self, tied: bool = False) -> None:
        super().__init__()
        self.seen: list[torch.Tensor] = []
        self.logits = torch.tensor([0.0, 0.0] if tied else [1.0, 0.0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.clone())
        return self.logits.expand(len(x), 2)


def test_certify_noise_is_the_documented_block_stream():
    """x = 0, σ = 1: the model sees the raw noise, which must be normal_blocks of the seeds.

    Near ties (equal logits) are classified again from their re-drawn noise in fixed-shape
    chunks whose unused rows are zeros: those rows are padding, not samples, and the re-drawn
    samples must be the same documented noise."""
    n0, n, seed, test_set = 7, NOISE_BLOCK + 30, 11 << 70, "fog_s3/test"

    def run(model: Recorder) -> torch.Tensor:
        certify(
            model, torch.zeros(2, 1, 2, 2), [0, 1], sigma=1.0, n0=n0, n=n, seed=seed,
            indices=[4, 9], test_set=test_set, batch_size=97, channels_last=False,
        )  # fmt: skip
        return torch.cat(model.seen)

    base = derive_seed(seed, test_set)
    expected = []
    for index in (4, 9):
        for phase, count in ((SELECT, n0), (ESTIMATE, n)):
            sizes = [min(NOISE_BLOCK, count - s) for s in range(0, count, NOISE_BLOCK)]
            seeds = noise_block_seeds(base, index, phase, count)
            expected += list(normal_blocks(seeds, sizes, (1, 2, 2)))
    expected_rows = torch.cat(expected)
    assert torch.equal(run(Recorder()), expected_rows)

    def multiset(rows: torch.Tensor) -> list[tuple[float, ...]]:
        return sorted(map(tuple, rows.flatten(1).tolist()))

    tied = run(Recorder(tied=True)).flatten(1)
    samples = tied[tied.abs().sum(dim=1) > 0]  # drop the zero padding rows of settle chunks
    assert len(tied) > len(samples)  # the chunks were padded
    assert multiset(samples) == multiset(torch.cat([expected_rows, expected_rows]))


@pytest.mark.slow  # ~7 s on an idle core (400,000 seeded generator states)
def test_no_identical_noise_blocks_among_400_000():
    """800 images × 500 estimation blocks of one test set, through the engine's seeds.

    With 32-bit seeds the birthday bound predicts about 19 identical pairs here (asserted on the
    derived seeds as a control); with all 64 bits there must be none. Blocks are compared by
    their first four values: distinct fingerprints imply distinct blocks, and any fingerprint
    collision is checked on the whole block.
    """
    images, blocks_per_image, shape = 800, 500, (1, 1, 1)
    base = derive_seed(3, "cifar10-f/fc05_a2_s3")
    count = blocks_per_image * NOISE_BLOCK
    sizes = [NOISE_BLOCK] * blocks_per_image
    seeds = np.empty((images, blocks_per_image), dtype=np.uint64)
    prints = np.empty((images, blocks_per_image, 4), dtype=np.float32)
    generator = torch.Generator()
    for index in range(images):
        row = noise_block_seeds(base, index, ESTIMATE, count)
        seeds[index] = row
        for b, block in enumerate(normal_blocks(row, sizes, shape, generator=generator)):
            prints[index, b] = block[:4, 0, 0, 0].numpy()
    seeds, prints = seeds.ravel(), prints.reshape(-1, 4)
    assert len(seeds) >= 400_000
    assert len(np.unique(seeds)) == len(seeds)
    low32 = seeds & np.uint64(0xFFFFFFFF)
    assert len(seeds) - len(np.unique(low32)) > 0  # manual_seed would have repeated blocks
    keys = prints.view(np.uint64).view([("a", np.uint64), ("b", np.uint64)]).ravel()
    _, first, counts = np.unique(keys, return_index=True, return_counts=True)
    identical = 0
    for position in np.flatnonzero(counts > 1):
        twins = np.flatnonzero(keys == keys[first[position]])
        blocks = [
            next(normal_blocks([int(seeds[t])], [NOISE_BLOCK], shape, generator=generator))
            for t in twins
        ]
        identical += sum(torch.equal(blocks[0], other) for other in blocks[1:])
    assert identical == 0


@pytest.mark.parametrize(
    "text,value",
    [
        ("0", 0),
        ("12345", 12345),
        ("0x1f", 31),
        ("0X" + "ab" * 16, int("ab" * 16, 16)),
        (str(1 << 127), 1 << 127),
        (" 7 ", 7),
        (2**200, 2**200),
    ],
)
def test_parse_seed_accepts_decimal_hex_and_128_bit(text, value):
    assert parse_seed(text) == value


@pytest.mark.parametrize("text", ["-1", "abc", "0x", "1.5", "deadbeef", str(1 << 256)])
def test_parse_seed_rejects_with_a_clear_message(text):
    with pytest.raises(CertificationError, match="seed"):
        parse_seed(text)
