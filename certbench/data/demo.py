"""The demo data set: scikit-learn's handwritten digits as 32×32 RGB images, train and test splits.

Real images small enough to train and certify on a laptop CPU in minutes, written without any
network access from the copy scikit-learn ships (``sklearn.datasets.load_digits``: 1,797 images,
10 classes, the test part of the UCI "Optical Recognition of Handwritten Digits" data by
E. Alpaydin and C. Kaynak, 1998, licence CC BY 4.0).

Exact construction (deterministic; no random numbers):

- pixels: each 8×8 value ``v`` in 0..16 (the number of "on" pixels in a 4×4 block of the
  original 32×32 bitmap) becomes ``floor(v·255/16 + 0.5)`` in uint8, so 0 → 0 and 16 → 255;
- size: every pixel is repeated into a 4×4 block (nearest-neighbour ×4 upscaling, ``np.repeat``
  on both axes), which restores the 32×32 grid of the original bitmaps, so the CIFAR
  architectures of the registry apply unchanged;
- colour: the grey value is copied to the three RGB channels;
- split: within each class, in scikit-learn's order, every 5th image (the class's images 0, 5,
  10, …) goes to ``test``, the others to ``train``: 364 test and 1,433 train images, every class
  in both in a 1:4 proportion;
- ``source_index`` is the image's position in ``load_digits()``; labels are the digits, class
  names ``"0"`` … ``"9"``.

Layout: one ``default`` config with ``train`` and ``test`` splits in the Hub layout
(:mod:`certbench.data.writer`), readable by ``certbench.data.sources.load_images(DIR, split=...)``.
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from certbench.data.writer import BENCHMARK_KEY, write_card, write_split
from certbench.errors import DataSourceError

__all__ = [
    "CLASS_NAMES",
    "DEMO_BENCHMARK",
    "DEMO_PRETTY_NAME",
    "TEST_EVERY",
    "UPSCALE",
    "DemoDataset",
    "demo_images",
    "demo_splits",
    "write_demo_dataset",
]

CLASS_NAMES = tuple(str(d) for d in range(10))
UPSCALE = 4
"""Each 8×8 pixel becomes an UPSCALE×UPSCALE block (8 × 4 = 32)."""
TEST_EVERY = 5
"""Every TEST_EVERY-th image of each class (by rank within the class) is a test image."""
MAX_VALUE = 16
DEMO_BENCHMARK = "demo-digits"
"""The leaderboard's benchmark for this data (``models/catalog/definitions/demo-digits.json``),
written
into the card as ``certbench_benchmark`` so ``certbench train`` puts it in the manifest."""
DEMO_PRETTY_NAME = "certbench demo: handwritten digits 32×32"


@dataclass(frozen=True)
class DemoDataset:
    """What :func:`write_demo_dataset` wrote: the folder, split sizes and a content digest."""

    out: Path
    counts: dict[str, int]
    sha256: str


def demo_images() -> tuple[np.ndarray, np.ndarray]:
    """All 1,797 digits as uint8 ``(N, 3, 32, 32)`` images and int64 labels, in sklearn order."""
    values, target = _digits()
    if values.shape[1:] != (8, 8) or values.min() < 0 or values.max() > MAX_VALUE:
        raise DataSourceError(
            f"scikit-learn's digits have shape {values.shape} and range "
            f"[{values.min()}, {values.max()}], expected (N, 8, 8) in [0, 16]; reinstall "
            "scikit-learn"
        )
    grey = np.floor(values * 255.0 / MAX_VALUE + 0.5).astype(np.uint8)
    big = grey.repeat(UPSCALE, axis=1).repeat(UPSCALE, axis=2)
    rgb = np.ascontiguousarray(np.repeat(big[:, None], 3, axis=1))
    return rgb, target


DIGITS_FILE = ("datasets", "data", "digits.csv.gz")
"""Where scikit-learn keeps the digits, inside its package: 64 pixel values then the digit, one
image per line, comma-separated (what ``load_digits`` parses)."""


def _digits() -> tuple[np.ndarray, np.ndarray]:
    """``load_digits().images`` and ``.target``, read from the file scikit-learn ships without
    importing scikit-learn: that import (scipy and more) took 6 of the 6.3 s every first start
    of ``serve`` and every ``certbench datasets demo`` spent here; the file takes 0.03 s.
    ``tests/certbench/test_demo_data.py`` holds the two equal."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise DataSourceError(
            "the demo data set is built from scikit-learn's digits, and scikit-learn is not "
            "installed: `uv sync` installs it"
        )
    path = Path(spec.submodule_search_locations[0]).joinpath(*DIGITS_FILE)
    try:
        table = np.loadtxt(path, delimiter=",", ndmin=2)
    except (OSError, ValueError) as err:
        raise DataSourceError(
            f"cannot read scikit-learn's digits at {path} ({err}); reinstall scikit-learn"
        ) from err
    if table.shape[1] != 65:
        raise DataSourceError(
            f"scikit-learn's digits at {path} have {table.shape[1]} columns, expected 65 "
            "(64 pixels and the digit); reinstall scikit-learn"
        )
    return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(np.int64)


def demo_splits(labels: np.ndarray) -> dict[str, np.ndarray]:
    """Positions of the ``train`` and ``test`` images (sorted): every 5th of each class is test."""
    test = np.zeros(len(labels), dtype=bool)
    for digit in np.unique(labels):
        members = np.flatnonzero(labels == digit)
        test[members[::TEST_EVERY]] = True
    return {"train": np.flatnonzero(~test), "test": np.flatnonzero(test)}


def _digest(images: np.ndarray, labels: np.ndarray, splits: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for split, positions in splits.items():
        digest.update(split.encode())
        digest.update(np.ascontiguousarray(images[positions]).tobytes())
        digest.update(labels[positions].astype("<i8").tobytes())
        digest.update(positions.astype("<i8").tobytes())
    return digest.hexdigest()


def write_demo_dataset(out: Path | str) -> DemoDataset:
    """Write the demo data set into ``out`` (created; existing files are replaced)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise DataSourceError(f"--out {str(out)!r} is a file; give a folder for the data set")
    images, labels = demo_images()
    splits = demo_splits(labels)
    for split, positions in splits.items():
        write_split(
            out,
            split,
            images=images[positions],
            labels=labels[positions],
            class_names=CLASS_NAMES,
            source_index=positions,
        )
    sha = _digest(images, labels, splits)
    counts = {split: len(positions) for split, positions in splits.items()}
    write_card(
        out,
        splits=list(splits),
        pretty_name=DEMO_PRETTY_NAME,
        license="cc-by-4.0",
        body=_card_body(counts, sha),
        extra={BENCHMARK_KEY: DEMO_BENCHMARK},
    )
    return DemoDataset(out, counts, sha)


def _card_body(counts: dict[str, int], sha: str) -> str:
    return f"""
# certbench demo data: handwritten digits (32×32 RGB)

A small real data set for trying certbench on a CPU: scikit-learn's copy of the UCI "Optical
Recognition of Handwritten Digits" test data (E. Alpaydin, C. Kaynak, 1998; CC BY 4.0),
{counts["train"]} training and {counts["test"]} test images of the digits 0-9.
**Demo data: results on it are not comparable with any paper.**

Made by `certbench datasets demo` (deterministic, no network):

- each 8×8 value v ∈ 0..16 becomes floor(v·255/16 + 0.5) (uint8);
- each pixel is repeated into a 4×4 block (nearest-neighbour ×4: 32×32, the grid of the
  original bitmaps) and copied to the three RGB channels;
- within each class, in scikit-learn's order, every 5th image is a test image;
- `source_index` is the position in `sklearn.datasets.load_digits()`.

Content SHA-256 (pixels, labels and split positions): `{sha}`
"""
