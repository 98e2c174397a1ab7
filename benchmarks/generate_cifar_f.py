"""CIFAR-F generation throughput versus the released per-image numpy generator, same process.

    uv run python benchmarks/generate_cifar_f.py [--images 2000] [--sets 4] [--ref-images 300]

Ours: ``generators.cifar_f_build.generate`` end to end (seeded draws, batched torch FFTs, PNG
encoding, parquet shard, checksum), for both protocols. Reference: a faithful per-image numpy
port of the released ``generate_fft.py`` (type ``fourier``): its Python-loop mask once per
(α, f_c) amortised over 10,000 images, then per image fft2/fftshift, clip, uniform draws, ifft,
clip, rescale, and finally the int cast and ``np.save`` it did (it wrote .npy, no PNG). Data
loading is excluded from both sides. Images are synthetic 1/f "natural" images unless
``--source`` names a CIFAR test set. Runs alternate ours/reference and keep the best of
``--rounds`` to damp the noise of a shared machine; the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from certbench.data import ImageSet
from generators import cifar_f as cf
from generators import cifar_f_build as build

FULL_IMAGES = 192 * 10_000  # CIFAR-10-F: 192 test sets of 10,000 images
IMAGES_PER_SET = 10_000


def synthetic_set(n: int, seed: int = 0) -> ImageSet:
    """CIFAR-shaped test set with a 1/f amplitude spectrum (like natural images)."""
    rng = np.random.default_rng(seed)
    f = np.fft.fftfreq(32)
    radius = np.hypot(f[:, None], f[None, :])
    radius[0, 0] = 1.0
    shape = (n, 3, 32, 32)
    x = np.real(
        np.fft.ifft2((rng.standard_normal(shape) + 1j * rng.standard_normal(shape)) / radius)
    )
    x = (x - x.mean(axis=(1, 2, 3), keepdims=True)) / x.std(axis=(1, 2, 3), keepdims=True)
    pixels = (np.clip(0.5 + 0.2 * x, 0, 1) * 255).round().astype(np.uint8)
    return ImageSet(
        name="synthetic",
        images=torch.from_numpy(pixels),
        labels=torch.from_numpy(rng.integers(0, 10, n)),
        indices=torch.arange(n),
        class_names=tuple(f"class{i}" for i in range(10)),
    )


# ----------------------------------------------------------------------------- released port


def released_min_frequency(i: int, j: int, f_c: float) -> float:
    d, d_min = [], 1000.0
    for ii in (i - 0.5, i, i + 0.5):
        for jj in (j - 0.5, j, j + 0.5):
            r = np.sqrt((ii - 15) ** 2 + (jj - 15) ** 2)
            d.append(r - f_c)
            d_min = np.minimum(d_min, np.abs(r - f_c))
    return 0 if np.min(d) * np.max(d) <= 0 else d_min


def released_mask(f_c: float, alpha: float) -> np.ndarray:
    mask = np.ones((32, 32))
    for i in range(32):
        for j in range(32):
            mask[i, j] = 1 / (released_min_frequency(i, j, f_c) + 1) ** alpha
    return mask


def released_set(x_float: np.ndarray, mask: np.ndarray, eps: float, out: Path) -> None:
    """One test set, per image, as the released loop did it (x_float: (N, 3, 32, 32) float32)."""
    plot = []
    for x_orig in x_float:
        x_orig_f = np.fft.fftshift(np.fft.fft2(x_orig.astype(np.float64)))
        x_orig_f_abs = np.abs(x_orig_f)
        x_orig_f_ang = np.angle(x_orig_f)
        n_abs = (
            np.minimum(np.maximum(x_orig_f_abs, 20), 200)
            * mask
            * np.random.uniform(0.8, 1.2, size=x_orig_f_abs.shape)
        )
        n_pha = np.random.uniform(*x_orig_f_ang.shape) * 2 * np.pi
        n = np.zeros_like(x_orig_f)
        n.real = n_abs * np.cos(n_pha)
        n.imag = n_abs * np.sin(n_pha)
        x_orig_f += n
        x_restored = np.clip(np.abs(np.fft.ifft2(np.fft.ifftshift(x_orig_f))), 0.0, 1.0)
        delta = x_restored - x_orig
        delta = delta / np.linalg.norm(delta) * eps
        plot.append(delta + x_orig)
    np.save(out, np.clip((np.stack(plot) * 255).astype(int), 0, 255))


# ----------------------------------------------------------------------------- timing


def specs_sample(count: int) -> list[cf.CifarFSpec]:
    """``count`` test sets spread over the grid (every α, f_c low to high, all severities)."""
    return [
        cf.CifarFSpec(f_c=1 + (5 * k + 2) % 16, alpha=cf.ALPHAS[k % 4], severity=1 + k % 3)
        for k in range(count)
    ]


def time_ours(
    images: ImageSet, specs: list[cf.CifarFSpec], protocol: cf.Protocol, threads: int
) -> float:
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        build.generate(
            images, out, specs, dataset="cifar10", protocol=protocol, card=False, threads=threads
        )
        return time.perf_counter() - started


def time_released(images: ImageSet, specs: list[cf.CifarFSpec], n_ref: int) -> float:
    """Seconds per image of the released generator (mask amortised over 10,000 images)."""
    np.random.seed(0)  # the release was unseeded; seeding does not change its speed
    x = (images.images[:n_ref].to(torch.float32) / 255.0).numpy()
    per_image = []
    with tempfile.TemporaryDirectory() as out:
        for k, spec in enumerate(specs):
            started = time.perf_counter()
            mask = released_mask(spec.f_c, spec.alpha)
            mask_s = time.perf_counter() - started
            started = time.perf_counter()
            released_set(x, mask, spec.eps, Path(out) / f"{k}.npy")
            per_image.append((time.perf_counter() - started) / n_ref + mask_s / IMAGES_PER_SET)
    return float(np.mean(per_image))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: checks that it runs (seconds)"
    )
    parser.add_argument("--images", type=int, default=2000, help="images per test set (ours)")
    parser.add_argument("--sets", type=int, default=4, help="test sets per run")
    parser.add_argument("--ref-images", type=int, default=300, help="images per set (released)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--source", default=None, help="optional real CIFAR-10 test set")
    parser.add_argument(
        "--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1), help="torch threads"
    )
    args = parser.parse_args()
    if args.smoke:
        args.images, args.sets, args.ref_images, args.rounds, args.threads = 20, 1, 5, 1, 1
    images = (
        build.load_source("cifar10", args.source, revision=None, limit=args.images)
        if args.source
        else synthetic_set(args.images)
    )
    specs = specs_sample(args.sets)
    n_ours = len(images) * len(specs)
    print(
        f"machine: {os.cpu_count()} CPUs, torch threads {args.threads} + PNG writer, "
        f"load average {os.getloadavg()[0]:.1f} (shared with other jobs), "
        f"Python {sys.version.split()[0]}"
    )
    print(f"sample: {len(specs)} sets {[s.name for s in specs]} x {len(images)} images")
    build.generate(images, tempfile.mkdtemp(), specs[:1], dataset="cifar10", card=False)  # warm-up
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        best["released"] = min(
            best.get("released", np.inf), time_released(images, specs, args.ref_images)
        )
        for protocol in cf.Protocol:
            seconds = time_ours(images, specs, protocol, args.threads) / n_ours
            best[protocol.value] = min(best.get(protocol.value, np.inf), seconds)
    ref_rate = 1.0 / best["released"]
    print(f"released generate_fft.py port (numpy, per image): {ref_rate:8.0f} images/s")
    for protocol in cf.Protocol:
        rate = 1.0 / best[protocol.value]
        full_min = FULL_IMAGES / rate / 60
        print(
            f"ours, protocol {protocol.value:9s} (incl. PNG + parquet): {rate:8.0f} images/s = "
            f"{rate / ref_rate:5.1f}x released; full CIFAR-10-F ({FULL_IMAGES:,} images) "
            f"~ {full_min:.1f} min (released port ~ {FULL_IMAGES / ref_rate / 60:.0f} min)"
        )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
