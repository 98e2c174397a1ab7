"""Writers of tiny datasets in the exact on-disk layouts ``certbench.data.sources`` reads, and
:func:`assert_same`, the check that a loaded set holds exactly what was written.

Tests use them instead of downloads. Other test modules may import them, e.g.::

    from tests.support.data_layouts import random_images, write_hub_folder, write_torchvision_cifar

Images are passed as uint8 numpy arrays of shape (N, 3, H, W), the layout of
``certbench.data.image_set.ImageSet.images``; a Hub folder also accepts PIL images so that tests can
write malformed data (grayscale, RGBA, mixed sizes).
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch
import yaml
from datasets import ClassLabel, Dataset, Features, Image, Value
from huggingface_hub.repocard import metadata_load
from PIL import Image as PILImage

if TYPE_CHECKING:
    from certbench.data.image_set import ImageSet

CIFAR10_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
CIFAR100_FINE = tuple(f"fine_{i:02d}" for i in range(100))
CIFAR100_COARSE = tuple(f"coarse_{i:02d}" for i in range(20))


def random_images(count: int, *, seed: int = 0, size: int = 32) -> np.ndarray:
    """``count`` random uint8 images of shape (3, size, size), reproducible from ``seed``."""
    return np.random.default_rng(seed).integers(0, 256, (count, 3, size, size), dtype=np.uint8)


def random_labels(count: int, num_classes: int, *, seed: int = 0) -> np.ndarray:
    """``count`` random int64 labels in [0, num_classes)."""
    return np.random.default_rng(seed + 1).integers(0, num_classes, count, dtype=np.int64)


def assert_same(image_set: ImageSet, images: np.ndarray, labels: np.ndarray) -> None:
    """``image_set`` holds exactly ``images`` and ``labels``, with the dtypes of an ImageSet."""
    assert image_set.images.dtype == torch.uint8
    assert image_set.labels.dtype == torch.int64
    assert image_set.indices.dtype == torch.int64
    np.testing.assert_array_equal(image_set.images.numpy(), images)
    np.testing.assert_array_equal(image_set.labels.numpy(), labels)


# ----------------------------------------------------------------------------- torchvision


def write_torchvision_cifar(
    root: str | Path,
    dataset: Literal["cifar10", "cifar100"],
    images: np.ndarray,
    labels: Sequence[int] | np.ndarray,
    *,
    split: Literal["train", "test"] = "test",
    coarse_labels: Sequence[int] | np.ndarray | None = None,
    class_names: Sequence[str] | None = None,
    coarse_class_names: Sequence[str] | None = None,
    protocol: int = 2,
) -> Path:
    """Write one split in the official CIFAR python layout under ``root``; return its folder.

    CIFAR-10: ``root/cifar-10-batches-py/`` with ``batches.meta`` (``label_names``) and
    ``test_batch`` or ``data_batch_1..5`` (the train images spread over five batches).
    CIFAR-100: ``root/cifar-100-python/`` with ``meta`` (``fine_label_names``,
    ``coarse_label_names``) and ``train``/``test`` (``fine_labels``, ``coarse_labels``).
    Batches are pickled dicts with the official keys (``data`` as (N, 3072) uint8 rows in
    channel-plane order, ``filenames``, ``batch_label``), protocol 2 as the originals. Call once
    per split; the meta file is rewritten each time. ``labels`` are written as given (a plain
    list of ints), so tests can write out-of-range or miscounted labels on purpose.
    """
    images = np.asarray(images)
    labels = [int(v) for v in labels]
    if dataset == "cifar10":
        folder = Path(root) / "cifar-10-batches-py"
        names = list(class_names or CIFAR10_CLASSES)
        meta = {
            "num_cases_per_batch": 10000,
            "label_names": names,
            "num_vis": int(np.prod(images.shape[1:])),
        }
        _pickle(folder / "batches.meta", meta, protocol)
        parts = (
            [("test_batch", np.arange(len(images)))]
            if split == "test"
            else [
                (f"data_batch_{i + 1}", part)
                for i, part in enumerate(np.array_split(np.arange(len(images)), 5))
            ]
        )
        for file_name, rows in parts:
            batch = {
                "batch_label": f"{split} batch {file_name}",
                "labels": labels if split == "test" else [labels[r] for r in rows],
                "data": images[rows].reshape(len(rows), int(np.prod(images.shape[1:]))),
                "filenames": [f"image_{r:05d}.png" for r in rows],
            }
            _pickle(folder / file_name, batch, protocol)
        return folder
    folder = Path(root) / "cifar-100-python"
    meta = {
        "fine_label_names": list(class_names or CIFAR100_FINE),
        "coarse_label_names": list(coarse_class_names or CIFAR100_COARSE),
    }
    _pickle(folder / "meta", meta, protocol)
    coarse = [int(v) for v in (coarse_labels if coarse_labels is not None else [0] * len(labels))]
    batch = {
        "filenames": [f"image_{r:05d}.png" for r in range(len(images))],
        "batch_label": f"{split} batch 1 of 1",
        "fine_labels": labels,
        "coarse_labels": coarse,
        "data": images.reshape(len(images), int(np.prod(images.shape[1:]))),
    }
    _pickle(folder / split, batch, protocol)
    return folder


def _pickle(path: Path, obj: object, protocol: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        pickle.dump(obj, handle, protocol=protocol)


# ----------------------------------------------------------------------------- Hub layout


def write_hub_folder(
    root: str | Path,
    config: str,
    images: np.ndarray | Sequence[PILImage.Image],
    labels: Sequence[int] | np.ndarray,
    *,
    class_names: Sequence[str],
    split: str = "test",
    extra: Mapping[str, Sequence[object] | np.ndarray] | None = None,
    source_index: Sequence[int] | np.ndarray | None = None,
    coarse_labels: Sequence[int] | np.ndarray | None = None,
    coarse_class_names: Sequence[str] | None = None,
    data_dir: str = "data",
    image_column: str = "image",
    label_column: str = "label",
) -> Path:
    """Add one config's split to a Hub-layout folder (DESIGN.md §5); return the parquet file.

    Writes ``root/<data_dir>/<config>/<split>-00000-of-00001.parquet`` with
    ``datasets.Dataset.from_dict(...).to_parquet``: features ``image`` (Image, PNG), ``label``
    (ClassLabel with ``class_names``), optional ``coarse_label`` (ClassLabel), the ``extra``
    metadata columns (Value types from their numpy dtypes) and optional ``source_index`` (int64).
    README.md's YAML ``configs:`` gains (or updates) the entry of ``config`` with one
    ``{split, path}`` data file per split written so far, so the folder loads with
    ``datasets.load_dataset(root, config, split=split)``. ``data_dir=""`` with
    ``image_column="img"`` (and ``label_column="fine_label"``) mimics ``uoft-cs/cifar10``
    (``uoft-cs/cifar100``), whose files are ``<config>/<split>-*.parquet``.
    """
    root = Path(root)
    pictures = (
        [PILImage.fromarray(np.ascontiguousarray(img.transpose(1, 2, 0))) for img in images]
        if isinstance(images, np.ndarray)
        else list(images)
    )
    columns: dict[str, object] = {image_column: pictures, label_column: [int(v) for v in labels]}
    spec: dict[str, object] = {
        image_column: Image(),
        label_column: ClassLabel(names=list(class_names)),
    }
    if coarse_labels is not None:
        columns["coarse_label"] = [int(v) for v in coarse_labels]
        spec["coarse_label"] = ClassLabel(names=list(coarse_class_names or ()))
    for name, values in (extra or {}).items():
        array = np.asarray(values)
        columns[name] = array.tolist()
        spec[name] = _value_type(array)
    if source_index is not None:
        columns["source_index"] = [int(v) for v in source_index]
        spec["source_index"] = Value("int64")
    relative = "/".join(p for p in (data_dir, config, f"{split}-00000-of-00001.parquet") if p)
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    Dataset.from_dict(columns, features=Features(spec)).to_parquet(str(path))
    _add_readme_config(root, config, split, relative)
    return path


def _value_type(array: np.ndarray) -> Value:
    if array.dtype.kind in "iu":
        return Value(str(array.dtype))
    if array.dtype.kind == "f":
        return Value(str(array.dtype))
    if array.dtype.kind == "b":
        return Value("bool")
    return Value("string")


def _add_readme_config(root: Path, config: str, split: str, relative: str) -> None:
    readme = root / "README.md"
    header = (metadata_load(readme) or {}) if readme.is_file() else {}
    configs = header.setdefault("configs", [])
    entry = next((c for c in configs if c.get("config_name") == config), None)
    if entry is None:
        entry = {"config_name": config, "data_files": []}
        configs.append(entry)
    entry["data_files"] = [f for f in entry["data_files"] if f["split"] != split]
    entry["data_files"].append({"split": split, "path": relative})
    body = "# Test dataset\n\nWritten by tests/support/data_layouts.py.\n"
    readme.write_text(f"---\n{yaml.safe_dump(header, sort_keys=False)}---\n\n{body}", "utf-8")
