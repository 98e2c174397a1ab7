"""Counter-based random streams, vectorised over images.

Generated datasets must be byte-identical for any batch size and on any machine, and each
image's randomness must derive from (seed, test set, image index) alone. A stateful generator per
image would need a Python loop over images; instead every random number is a pure function
``hash(image_key, counter)``: SplitMix64's finaliser evaluated with numpy uint64 arithmetic
(which wraps modulo 2**64 and shifts logically, exactly like the reference C code). A whole batch
of streams is then a handful of array passes, and any image can be regenerated on its own.
numpy is used rather than torch because torch's int64 right shift is not vectorised on CPU
(~6x slower here).
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_LOW32 = np.uint64(0xFFFFFFFF)
_ONE_BITS = np.uint64(0x3FF0000000000000)  # exponent bits of 1.0: mantissa m -> 1 + m / 2**52


def splitmix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser, in place on a uint64 array (a bijective 64-bit avalanche)."""
    tmp = np.empty_like(z)
    for bits, mul in ((30, _MIX1), (27, _MIX2), (31, None)):
        np.right_shift(z, np.uint64(bits), out=tmp)
        np.bitwise_xor(z, tmp, out=z)
        if mul is not None:
            np.multiply(z, mul, out=z)
    return z


def stream_key(seed: int, *names: str | int) -> int:
    """A 64-bit key folding a seed and names (e.g. dataset, test-set name) together, stably."""
    text = "\x1f".join([str(int(seed)), *map(str, names)])
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def image_keys(key: int, indices: torch.Tensor | np.ndarray) -> np.ndarray:
    """uint64 per-image keys from a test-set key and the images' indices in the source split."""
    idx = np.asarray(indices, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        return splitmix64(idx * _GOLDEN + np.uint64(key))


def uniform(keys: np.ndarray, count: int, *, offset: int = 0) -> torch.Tensor:
    """``(B, count)`` float64 draws in [0, 1) with 32 random bits each; row b is stream keys[b].

    Hash ``h = hash(key, offset + j + 1)`` yields draws ``2j`` (high 32 bits) and ``2j + 1`` (low
    32 bits); disjoint ``offset`` ranges (in hashes, ``ceil(count / 2)`` per call) give
    independent draws for different purposes (amplitudes, phases) of the same image.
    """
    pairs = (count + 1) // 2
    counters = np.arange(offset + 1, offset + pairs + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.asarray(keys, dtype=np.uint64)[:, None] + counters[None, :] * _GOLDEN
        splitmix64(z)
    # Exact integer -> float conversion without numpy's slow uint64 cast: put the 32 random bits
    # at the top of the mantissa of a float in [1, 2), then subtract 1.
    bits = np.empty((z.shape[0], pairs, 2), dtype=np.uint64)
    np.right_shift(z, np.uint64(32), out=bits[:, :, 0])
    np.bitwise_and(z, _LOW32, out=bits[:, :, 1])
    np.left_shift(bits, np.uint64(20), out=bits)
    np.bitwise_or(bits, _ONE_BITS, out=bits)
    out = bits.view(np.float64)
    out -= 1.0
    return torch.from_numpy(out.reshape(z.shape[0], 2 * pairs)[:, :count])


def uniform_offset(count: int) -> int:
    """Number of hashes a ``uniform(keys, count)`` call consumes (for the next call's offset)."""
    return (count + 1) // 2
