"""Per-image random streams: 64-bit derived seeds, used in full on every device.

Every random draw of certification (noise blocks) and of the robustness stage (APGD random
starts) comes from a generator seeded by a 64-bit *block seed* ``s = derive_seed(seed, *keys)``
(numpy's SeedSequence over the run seed, which may be any non-negative integer, 128-bit secret
seeds included, and the keys: test set, image index, phase, block). Streams therefore depend only
on (seed, keys), never on batch size, packing of images or sharding.

How ``s`` seeds torch's generator depends on the device, because the generators differ:

- CUDA (and other accelerators): torch's Philox4x32-10 generator, ``manual_seed(s)``; Philox's
  key is 64 bits, so all of ``s`` is used.
- CPU: torch's Mersenne Twister (MT19937). ``manual_seed`` would keep only the low 32 bits of
  ``s`` (``init_genrand`` takes a 32-bit seed), so two of 400,000 blocks share their noise by the
  birthday bound about 19 times. Instead the 624-word MT state is written directly: word 0 is
  ``0x80000000`` (the non-zero guarantee of Matsumoto & Nishimura's ``init_by_array``) and words
  1..623 are SplitMix64 outputs ``mix64(s + k·0x9E3779B97F4A7C15)``, k = 1..312, each split into
  (low 32 bits, high 32 bits). torch regenerates (twists) the state before its first draw.
  SplitMix64's finaliser ``mix64`` is a bijection, so distinct block seeds give distinct states.

The same seed gives the same records on the same device type; CPU and CUDA records differ
(different generators), as torch's own streams do.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Any, cast

import numpy as np
import torch

from certbench.errors import CertificationError

SEED_BITS_MAX = 256
"""Largest accepted run seed, in bits (the service draws 128-bit secrets)."""

_MT_WORDS = 624
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_COUNTERS = np.arange(1, _MT_WORDS // 2 + 1, dtype=np.uint64)


def derive_seed(seed: int, *keys: int | str) -> int:
    """A 64-bit seed for a sub-stream; strings (e.g. test-set names) are hashed stably.

    ``seed`` may be any non-negative integer: every bit enters numpy's SeedSequence entropy,
    so seeds that differ only above bit 64 still give different streams.
    """
    if seed < 0:
        raise CertificationError(f"seed must be a non-negative integer, got {seed}")
    words = [_key_word(key) for key in keys]
    state = np.random.SeedSequence(entropy=seed, spawn_key=words).generate_state(2, np.uint32)
    return int(state[0]) << 32 | int(state[1])


def _key_word(key: int | str) -> int:
    if isinstance(key, str):
        return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
    if key < 0:
        raise CertificationError(f"random-stream keys must be non-negative, got {key}")
    return int(key)


_M32 = 0xFFFFFFFF
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R, _POOL = 0xCA01F9DD, 0x4973F715, 4
"""numpy's SeedSequence constants (NEP 19; O'Neill's seed_seq_fe128 design)."""


def derive_seeds(seed: int, *keys: int | str, last: np.ndarray) -> np.ndarray:
    """``derive_seed(seed, *keys, k)`` for every k in `last` (< 2**32), vectorised, bit-exact.

    SeedSequence hashes its entropy words in order with a data-independent sequence of hash
    constants, so the words before the last are mixed once (as 1-element arrays) and only the
    last word (e.g. the block number) as a whole array. Tests compare with ``derive_seed``.
    """
    last = np.asarray(last, dtype=np.uint64)
    if last.size and int(last.max()) > _M32:
        raise CertificationError("derive_seeds needs last keys below 2**32")
    if seed < 0:
        raise CertificationError(f"seed must be a non-negative integer, got {seed}")
    run = _words(seed)
    run += [0] * max(0, _POOL - len(run))  # the spawn key is never empty here
    prefix = run + [w for key in keys for w in _words(_key_word(key))]
    pool, hash_const = _mix_entropy(prefix)
    x = last.astype(np.uint32)
    mixed = []
    for word in pool:
        h, hash_const = _hashmix(x, hash_const)
        mixed.append(_mix(word, h))
    out = []
    hash_const = _INIT_B
    for word in mixed[:2]:  # generate_state(2): pool words 0 and 1
        value = word ^ np.uint32(hash_const)
        hash_const = hash_const * _MULT_B & _M32
        value = value * np.uint32(hash_const)
        out.append((value ^ (value >> np.uint32(16))).astype(np.uint64))
    return out[0] << np.uint64(32) | out[1]


def _words(value: int) -> list[int]:
    """numpy's little-endian uint32 words of a non-negative integer (at least one)."""
    words = [value & _M32]
    value >>= 32
    while value:
        words.append(value & _M32)
        value >>= 32
    return words


def _hashmix(value: np.ndarray, hash_const: int) -> tuple[np.ndarray, int]:
    """SeedSequence's hashmix of uint32 values (arrays wrap mod 2**32); returns the next const."""
    value = value ^ np.uint32(hash_const)
    hash_const = hash_const * _MULT_A & _M32
    value = value * np.uint32(hash_const)
    return value ^ (value >> np.uint32(16)), hash_const


def _mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """SeedSequence's mix of two uint32 arrays."""
    result = np.asarray(np.uint32(_MIX_L) * x - np.uint32(_MIX_R) * y, dtype=np.uint32)
    return result ^ np.right_shift(result, np.uint32(16))


def _mix_entropy(entropy: list[int]) -> tuple[list[np.ndarray], int]:
    """SeedSequence.mix_entropy of the given words: the pool and the next hash constant."""
    words = [np.array([w], dtype=np.uint32) for w in entropy]
    hash_const = _INIT_A
    pool = []
    for i in range(_POOL):
        h, hash_const = _hashmix(words[i] if i < len(words) else np.zeros(1, np.uint32), hash_const)
        pool.append(h)
    for src in range(_POOL):
        for dst in range(_POOL):
            if src != dst:
                h, hash_const = _hashmix(pool[src], hash_const)
                pool[dst] = _mix(pool[dst], h)
    for word in words[_POOL:]:
        for dst in range(_POOL):
            h, hash_const = _hashmix(word, hash_const)
            pool[dst] = _mix(pool[dst], h)
    return pool, hash_const


_SEED_TEXT = re.compile(r"(?:0[xX](?P<hex>[0-9a-fA-F]+)|(?P<dec>[0-9]+))")


def parse_seed(value: int | str) -> int:
    """A run seed from an integer, a decimal string or a ``0x``-prefixed hex string.

    Revealed service seeds are 128-bit; any size up to SEED_BITS_MAX bits is accepted. Bare hex
    without ``0x`` is refused: "1234" would be ambiguous.

    Raises:
        CertificationError: negative, too large, or not a decimal / 0x-hex number.
    """
    if isinstance(value, bool):
        raise CertificationError(f"seed must be an integer, got {value!r}")
    if isinstance(value, int):
        number = value
    else:
        text = value.strip().replace("_", "")
        match = _SEED_TEXT.fullmatch(text)
        if match is None:
            raise CertificationError(
                f"seed {value!r} is not a non-negative decimal integer or a 0x-prefixed hex "
                "string; write hex seeds as 0x<hex digits>"
            )
        number = int(match["hex"], 16) if match["hex"] else int(match["dec"])
    if number < 0 or number.bit_length() > SEED_BITS_MAX:
        raise CertificationError(
            f"seed must lie in [0, 2**{SEED_BITS_MAX}), got {value!r}; "
            "use the seed as printed by certbench or the service"
        )
    return number


def block_generator(device: torch.device | str) -> torch.Generator:
    """A generator on `device` to be (re)seeded per block with :func:`seed_generator`."""
    return torch.Generator(device=device)


def seed_generator(generator: torch.Generator, seed: int) -> torch.Generator:
    """Seed `generator` with all 64 bits of `seed` (see the module docstring for the definition)."""
    if not 0 <= seed < 1 << 64:
        raise CertificationError(f"a block seed must be a 64-bit unsigned integer, got {seed}")
    if generator.device.type != "cpu":
        return generator.manual_seed(seed)
    generator.set_state(_cpu_state(seed))
    return generator


def seeded_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A new generator on `device` seeded with all 64 bits of `seed`."""
    return seed_generator(block_generator(device), seed)


def normal_blocks(
    seeds: Sequence[int],
    sizes: Sequence[int],
    shape: Sequence[int],
    device: torch.device | str = "cpu",
    generator: torch.Generator | None = None,
) -> Iterator[torch.Tensor]:
    """Standard-normal fp32 blocks ``(sizes[i], *shape)``, block i drawn right after seeding
    the generator with ``seeds[i]``; lazy, so a consumer that stops early draws nothing more.

    On CPU the MT states of up to _CHUNK blocks are computed in one vectorised pass.
    """
    if len(seeds) != len(sizes):
        raise CertificationError(f"got {len(seeds)} block seeds for {len(sizes)} block sizes")
    generator = generator if generator is not None else block_generator(device)
    cpu = generator.device.type == "cpu"
    for first in range(0, len(seeds), _CHUNK):
        chunk = [int(s) for s in seeds[first : first + _CHUNK]]
        states = _cpu_states(chunk) if cpu else None
        for j, seed in enumerate(chunk):
            if states is None:
                seed_generator(generator, seed)
            else:
                generator.set_state(torch.from_numpy(states[j]))
            yield torch.randn(
                (sizes[first + j], *shape),
                generator=generator,
                device=generator.device,
                dtype=torch.float32,
            )


_CHUNK = 256
"""Blocks whose CPU states are computed together (256 × 5 kB of states)."""


def mt_state_words(seeds: np.ndarray | int) -> np.ndarray:
    """``(B, 624)`` uint32 MT19937 states for 64-bit seeds (one row per seed), vectorised.

    Word 0 is 0x80000000; words 1..623 are the first 623 halves (low, then high) of the
    SplitMix64 outputs mix64(s + k·γ), k = 1..312.
    """
    s = np.atleast_1d(np.asarray(seeds, dtype=np.uint64))
    with np.errstate(over="ignore"):
        z = s[:, None] + _COUNTERS[None, :] * _GOLDEN
        for bits, mul in ((30, _MIX1), (27, _MIX2), (31, None)):
            z ^= z >> np.uint64(bits)
            if mul is not None:
                z *= mul
    halves = z.astype("<u8").view("<u4")  # little-endian: (low, high) per output
    words = np.empty((len(s), _MT_WORDS), dtype=np.uint32)
    words[:, 0] = 0x80000000
    words[:, 1:] = halves[:, : _MT_WORDS - 1]
    return words


def _cpu_state(seed: int) -> torch.Tensor:
    return torch.from_numpy(_cpu_states([seed])[0])


def _cpu_states(seeds: Sequence[int]) -> list[np.ndarray]:
    """Serialized torch CPU generator states, one per 64-bit seed (initial seed = the seed).

    Rows of one numpy buffer: ``torch.from_numpy(row)`` starts a storage at the row. A row of a
    *torch* tensor instead (storage offset > 0) crashed ``set_state`` in torch 2.15.
    """
    for seed in seeds:
        if not 0 <= seed < 1 << 64:
            raise CertificationError(f"a block seed must be a 64-bit unsigned integer, got {seed}")
    layout = _cpu_layout()
    raw = np.tile(layout.template, (len(seeds), 1))
    start = layout.offset
    words = mt_state_words(np.array(seeds, dtype=np.uint64)).astype("<u8")
    raw[:, start : start + 8 * _MT_WORDS] = words.view(np.uint8)
    raw[:, :8] = np.array(seeds, dtype="<u8")[:, None].view(np.uint8)
    return list(raw)


class _Layout:
    """Where torch's serialized CPU generator state keeps the 624 MT words (as uint64 each)."""

    def __init__(self, template: np.ndarray, offset: int) -> None:
        self.template = template
        self.offset = offset


@lru_cache(maxsize=1)
def _cpu_layout() -> _Layout:
    """Find the MT words in torch's CPU state, then check that writing them reseeds the stream.

    torch's ``CPUGeneratorImplState`` stores the initial seed (int64) first and the 624 state
    words as uint64; we locate the words by matching ``numpy.random.RandomState(5489)``'s key
    (same ``init_genrand``) rather than trusting a fixed offset, and verify by drawing.
    """
    probe = torch.Generator().manual_seed(5489)
    template = probe.get_state()
    key = _legacy_key(5489).astype("<u8").tobytes()
    raw = template.numpy().tobytes()
    offset = raw.find(key)
    if offset < 8 or raw.find(key, offset + 1) != -1:
        raise CertificationError(
            f"torch {torch.__version__}'s CPU generator state has an unknown layout; "
            "certbench cannot seed it with 64 bits: pin the torch version in uv.lock"
        )
    layout = _Layout(template.numpy().copy(), offset)
    check = _legacy_key(12345).astype("<u8").view(np.uint8)
    state = template.clone()
    state.numpy()[offset : offset + 8 * _MT_WORDS] = check
    ours = torch.Generator()
    ours.set_state(state)
    reference = torch.Generator().manual_seed(12345)
    if not torch.equal(torch.randn(32, generator=ours), torch.randn(32, generator=reference)):
        raise CertificationError(
            f"torch {torch.__version__}'s CPU generator ignores written MT states; "
            "certbench cannot seed it with 64 bits: pin the torch version in uv.lock"
        )
    return layout


def _legacy_key(seed: int) -> np.ndarray:
    """The 624 MT words ``init_genrand(seed)`` gives (numpy's legacy RandomState seeding)."""
    state = cast(tuple[Any, ...], np.random.RandomState(seed).get_state(legacy=True))
    return np.asarray(state[1], dtype=np.uint32)
