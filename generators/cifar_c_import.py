"""Import the official CIFAR-10-C / CIFAR-100-C numpy release into the Hub layout.

The release (Hendrycks & Dietterich, Zenodo) is a folder of ``{corruption}.npy`` files, each
``(5 * N, 32, 32, 3)`` uint8 with the 5 severities stacked (rows ``(s-1)*N .. s*N-1`` are
severity s, N = 10,000), and ``labels.npy`` with the ``5 * N`` labels (the test labels repeated
per severity). Each (corruption, severity) becomes the config ``{corruption}_s{severity}`` with
the same columns as generated sets, so the leaderboard can certify on the data the literature used.
Files are read with ``allow_pickle=False`` and memory-mapped: they are data, never code.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from certbench.data import ImageSet
from certbench.errors import DataSourceError
from generators import bands, hub
from generators.corruption_benchmark import CorruptionBenchmark
from generators.corruption_card import write_card
from generators.corruption_sets import (
    CIFAR_C_CITATION,
    _save_spectrum,
    config_name,
    select,
    spectrum_path,
)
from generators.corruptions_c import CIFAR_C

IMPORT_VERSION = 1
EXTRA_CORRUPTIONS = ("speckle_noise", "gaussian_blur", "spatter", "saturate")
CIFAR10_CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
)  # fmt: skip
CIFAR100_CLASSES = tuple(
    [
        "apple",
        "aquarium_fish",
        "baby",
        "bear",
        "beaver",
        "bed",
        "bee",
        "beetle",
        "bicycle",
        "bottle",
        "bowl",
        "boy",
        "bridge",
        "bus",
        "butterfly",
        "camel",
        "can",
        "castle",
        "caterpillar",
        "cattle",
        "chair",
        "chimpanzee",
        "clock",
        "cloud",
        "cockroach",
        "couch",
        "crab",
        "crocodile",
        "cup",
        "dinosaur",
        "dolphin",
        "elephant",
        "flatfish",
        "forest",
        "fox",
        "girl",
        "hamster",
        "house",
        "kangaroo",
        "keyboard",
        "lamp",
        "lawn_mower",
        "leopard",
        "lion",
        "lizard",
        "lobster",
        "man",
        "maple_tree",
        "motorcycle",
        "mountain",
        "mouse",
        "mushroom",
        "oak_tree",
        "orange",
        "orchid",
        "otter",
        "palm_tree",
        "pear",
        "pickup_truck",
        "pine_tree",
        "plain",
        "plate",
        "poppy",
        "porcupine",
        "possum",
        "rabbit",
        "raccoon",
        "ray",
        "road",
        "rocket",
        "rose",
        "sea",
        "seal",
        "shark",
        "shrew",
        "skunk",
        "skyscraper",
        "snail",
        "snake",
        "spider",
        "squirrel",
        "streetcar",
        "sunflower",
        "sweet_pepper",
        "table",
        "tank",
        "telephone",
        "television",
        "tiger",
        "tractor",
        "train",
        "trout",
        "tulip",
        "turtle",
        "wardrobe",
        "whale",
        "willow_tree",
        "wolf",
        "woman",
        "worm",
    ]
)
CLASS_NAMES = {"cifar10": CIFAR10_CLASSES, "cifar100": CIFAR100_CLASSES}


def _not_generated(*args: object) -> np.ndarray:
    raise DataSourceError("the official CIFAR-C sets are imported with `certbench import cifar-c`.")


OFFICIAL = CorruptionBenchmark(
    key="cifar-c-official",
    suffix="-C",
    names=(*CIFAR_C, *EXTRA_CORRUPTIONS),
    apply=_not_generated,
    severity_value=lambda name, level: float(level),
    protocol="""Imported unchanged from the official numpy release of Hendrycks & Dietterich
(2019) (`{corruption}.npy`, 5 severities stacked, `labels.npy`); pixels are byte-identical to the
release. Use these sets to compare with numbers published on the official files.""",
    citation=CIFAR_C_CITATION,
    tags=("cifar-c",),
)


def _load(path: Path, what: str) -> np.ndarray:
    if not path.is_file():
        raise DataSourceError(
            f"{what} {path} is missing; --src must be the folder of the official release "
            "(e.g. CIFAR-10-C/) holding labels.npy and {corruption}.npy files."
        )
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as err:
        raise DataSourceError(f"{path} is not a plain numpy array file: {err}") from err


def read_labels(src: Path, num_classes: int) -> tuple[np.ndarray, int]:
    """The test labels (N,) from labels.npy (5N,), checked to repeat per severity."""
    labels = np.asarray(_load(src / "labels.npy", "labels file"))
    if labels.ndim != 1 or labels.size == 0 or labels.size % 5 or labels.dtype.kind not in "iu":
        raise DataSourceError(
            f"{src / 'labels.npy'} must be a 1-D integer array of 5 * N labels (5 severities "
            f"stacked), got {labels.dtype} {labels.shape}."
        )
    n = labels.size // 5
    per_severity = labels.reshape(5, n)
    if not (per_severity == per_severity[0]).all():
        raise DataSourceError(
            f"{src / 'labels.npy'}: the 5 severity blocks of {n} labels differ; expected the "
            "test labels repeated once per severity."
        )
    if per_severity.max() >= num_classes:
        raise DataSourceError(
            f"{src / 'labels.npy'} has label {int(per_severity.max())} but the dataset has "
            f"{num_classes} classes; pass the matching --dataset (cifar10 or cifar100)."
        )
    return per_severity[0].astype(np.int64), n


def import_cifar_c(
    src: str | Path,
    out_dir: str | Path,
    *,
    dataset: str,
    corruptions: Sequence[str] | None = None,
    severities: Sequence[int] | None = None,
    clean: ImageSet | None = None,
    progress: Callable[[str], None] | None = None,
) -> hub.GenerationReport:
    """Convert the release in ``src`` into configs under ``out_dir`` (resumable).

    ``clean``: the clean test images in release order (N images), used to compute the
    perturbation spectra and bands; without it the ``band`` column is empty.

    Raises:
        DataSourceError: missing folder/files, wrong shapes or dtypes, label mismatch.
    """
    if dataset not in CLASS_NAMES:
        raise DataSourceError(f"--dataset {dataset!r} is unknown; use cifar10 or cifar100.")
    source = Path(src)
    if not source.is_dir():
        raise DataSourceError(f"--src {source} is not a folder; point it at the release folder.")
    names = CLASS_NAMES[dataset]
    labels, n = read_labels(source, len(names))
    default = tuple(CIFAR_C)  # the 15 benchmark corruptions; extras only when asked for
    grid = select(OFFICIAL, list(corruptions) if corruptions else default, severities)
    for name in dict.fromkeys(c for c, _ in grid):  # check every file before writing anything
        _check_array(source / f"{name}.npy", n)
    clean_pixels = None
    if clean is not None:
        if len(clean) != n:
            raise DataSourceError(
                f"the clean source has {len(clean)} images but the release has {n} per severity."
            )
        clean_pixels = clean.images.permute(0, 2, 3, 1).contiguous().numpy()
    out = Path(out_dir)
    report = hub.GenerationReport(out_dir=out)
    started = time.perf_counter()
    for name, level in grid:
        config = config_name(name, level)
        block = _load(source / f"{name}.npy", "corruption file")[(level - 1) * n : level * n]
        block = np.ascontiguousarray(block)
        metadata = {
            "benchmark": OFFICIAL.key,
            "dataset": dataset,
            "corruption": name,
            "severity": level,
            "release_sha256": hashlib.sha256(block.tobytes()).hexdigest(),
            "labels_sha256": hashlib.sha256(labels.tobytes()).hexdigest(),
            "with_bands": clean_pixels is not None,
            "import_version": IMPORT_VERSION,
        }
        if hub.config_complete(out, config, metadata=metadata):
            report.skipped.append(config)
            continue
        band = ""
        if clean_pixels is not None:
            acc = bands.SpectrumAccumulator()
            acc.add(clean_pixels, block)
            _save_spectrum(out, config, acc.mean())
            band = bands.assign_band(acc.mean())
        else:
            spectrum_path(out, config).unlink(missing_ok=True)
        hub.write_config(
            out,
            config,
            images=block,
            labels=labels,
            class_names=names,
            columns={
                "corruption": np.full(n, name),
                "severity": np.full(n, level, dtype=np.int64),
                "severity_value": np.full(n, float(level)),
                "band": np.full(n, band),
            },
            source_index=np.arange(n, dtype=np.int64),
            metadata=metadata,
        )
        report.written.append(config)
        report.images_written += n
        if progress:
            progress(config)
    report.seconds = time.perf_counter() - started
    provenance = (  # no local path: the card is published; the hashes pin the release
        f"Imported from the official numpy release of Hendrycks & Dietterich (2019) ({n} images "
        "per severity); the `release_sha256` of every config's pixels and the `labels_sha256` "
        "are recorded in its `checksum.json`."
    )
    write_card(
        out,
        OFFICIAL,
        grid,
        dataset=dataset,
        num_images=n,
        provenance=provenance,
        clean_example=None if clean_pixels is None else clean_pixels[0],
    )
    return report


def _check_array(path: Path, n: int) -> None:
    array = _load(path, "corruption file")
    if array.dtype != np.uint8 or array.shape != (5 * n, 32, 32, 3):
        raise DataSourceError(
            f"{path} must be uint8 of shape ({5 * n}, 32, 32, 3) (5 severities of {n} images "
            f"stacked, matching labels.npy), got {array.dtype} {array.shape}."
        )
