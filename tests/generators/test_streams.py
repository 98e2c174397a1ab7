"""Counter-based streams: bit-exact SplitMix64, independence of keys, batch-free layout."""

from __future__ import annotations

import numpy as np
import pytest

from generators import streams

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def _splitmix_py(z: int) -> int:
    z &= MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def test_hash_matches_python_splitmix64_bit_for_bit() -> None:
    key = streams.stream_key(3, "cifar10", "fc05_a2_s3")
    keys = streams.image_keys(key, np.array([0, 7, 9999]))
    assert int(keys[1]) == _splitmix_py(7 * GOLDEN + key)
    draws = streams.uniform(keys, 5, offset=4).numpy()
    h = _splitmix_py(int(keys[2]) + 6 * GOLDEN)  # pair j=1 of offset 4 -> counter 6
    assert draws[2, 2] == (h >> 32) / 2**32
    assert draws[2, 3] == (h & 0xFFFFFFFF) / 2**32


def test_streams_depend_only_on_key_and_index() -> None:
    key = streams.stream_key(0, "a")
    idx = np.arange(50)
    all_rows = streams.uniform(streams.image_keys(key, idx), 300)
    some = streams.uniform(streams.image_keys(key, idx[[3, 41]]), 300)
    assert np.array_equal(some.numpy(), all_rows[[3, 41]].numpy())
    other = streams.uniform(streams.image_keys(streams.stream_key(1, "a"), idx), 300)
    assert not np.array_equal(other.numpy(), all_rows.numpy())
    assert streams.stream_key(0, "a", "b") != streams.stream_key(0, "ab")


def test_draws_look_uniform_and_uncorrelated() -> None:
    u = streams.uniform(streams.image_keys(5, np.arange(200)), 1000).numpy()
    assert u.min() >= 0 and u.max() < 1
    assert u.mean() == pytest.approx(0.5, abs=0.005)
    assert u.var() == pytest.approx(1 / 12, rel=0.02)
    assert abs(np.corrcoef(u[:, :-1].ravel(), u[:, 1:].ravel())[0, 1]) < 0.01
    assert abs(np.corrcoef(u[:-1].ravel(), u[1:].ravel())[0, 1]) < 0.01
