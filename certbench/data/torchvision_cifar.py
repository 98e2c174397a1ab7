"""Torchvision CIFAR folders (``cifar-10-batches-py``, ``cifar-100-python``) read as an
:class:`~certbench.data.image_set.ImageSet`.

Security: the torchvision CIFAR files are Python pickles. They are operator data, but they are still
read through a restricted unpickler that can only rebuild numpy arrays and plain containers.
"""

from __future__ import annotations

import codecs
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from certbench.data.image_set import ImageSet, Subset, selected_positions
from certbench.errors import DataSourceError


@dataclass(frozen=True)
class _CifarLayout:
    """Where one torchvision CIFAR variant keeps its splits, labels and class names."""

    folder: str
    splits: Mapping[str, tuple[str, ...]]
    meta: str
    label_key: str
    names_key: str
    coarse_label_key: str | None = None
    coarse_names_key: str | None = None


_CIFAR_LAYOUTS: Mapping[str, _CifarLayout] = {
    "cifar10": _CifarLayout(
        folder="cifar-10-batches-py",
        splits={"train": tuple(f"data_batch_{i}" for i in range(1, 6)), "test": ("test_batch",)},
        meta="batches.meta",
        label_key="labels",
        names_key="label_names",
    ),
    "cifar100": _CifarLayout(
        folder="cifar-100-python",
        splits={"train": ("train",), "test": ("test",)},
        meta="meta",
        label_key="fine_labels",
        names_key="fine_label_names",
        coarse_label_key="coarse_labels",
        coarse_names_key="coarse_label_names",
    ),
}
_CIFAR_SIDE = 32


def torchvision_dirs(path: Path) -> dict[str, Path]:
    """The torchvision CIFAR folders found at ``path`` (the folder itself or its children)."""
    found = {}
    for name, layout in _CIFAR_LAYOUTS.items():
        if path.name == layout.folder:
            found[name] = path
        elif (path / layout.folder).is_dir():
            found[name] = path / layout.folder
    return found


def load_torchvision(path: Path, config: str | None, split: str, subset: Subset) -> ImageSet:
    dirs = torchvision_dirs(path)
    if config is None:
        if len(dirs) > 1:
            raise DataSourceError(
                f"{str(path)!r} holds several CIFAR datasets {sorted(dirs)}; choose one with "
                f"config= (one of {sorted(dirs)})"
            )
        config = next(iter(dirs))
    if config not in dirs:
        raise DataSourceError(
            f"unknown config {config!r} for torchvision folder {str(path)!r}; available: "
            f"{sorted(dirs)}"
        )
    layout, folder = _CIFAR_LAYOUTS[config], dirs[config]
    if split not in layout.splits:
        raise DataSourceError(
            f"unknown split {split!r} for {config} in {str(folder)!r}; available: "
            f"{sorted(layout.splits)}"
        )
    meta = _read_cifar_pickle(folder / layout.meta)
    class_names = _names(meta, layout.names_key, folder / layout.meta)
    files = [folder / part for part in layout.splits[split]]
    batches = [_read_cifar_pickle(path) for path in files]
    pixels = [_cifar_pixels(batch, path) for batch, path in zip(batches, files, strict=True)]

    def labels_of(key: str) -> np.ndarray:
        return np.concatenate(
            [
                _cifar_labels(batch, key, path, len(data))
                for batch, path, data in zip(batches, files, pixels, strict=True)
            ]
        )

    data, labels = np.concatenate(pixels), labels_of(layout.label_key)
    positions = selected_positions(subset, len(data), f"{config}/{split}")
    coarse = coarse_names = None
    if layout.coarse_label_key is not None and layout.coarse_names_key is not None:
        coarse_names = _names(meta, layout.coarse_names_key, folder / layout.meta)
        coarse = torch.from_numpy(labels_of(layout.coarse_label_key)[positions])
    images = data[positions].reshape(-1, 3, _CIFAR_SIDE, _CIFAR_SIDE)
    return ImageSet(
        name=f"{config}/{split}",
        images=torch.from_numpy(np.ascontiguousarray(images)),
        labels=torch.from_numpy(labels[positions]),
        indices=torch.from_numpy(positions),
        class_names=class_names,
        coarse_labels=coarse,
        coarse_class_names=coarse_names,
    )


def _cifar_pixels(batch: Mapping[str, Any], path: Path) -> np.ndarray:
    """The batch's ``data`` as (N, 3072) uint8 rows (red plane, green plane, blue plane)."""
    data = batch.get("data")
    row = 3 * _CIFAR_SIDE * _CIFAR_SIDE
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8:
        raise DataSourceError(
            f"{str(path)!r}: 'data' must be a uint8 numpy array, found "
            f"{getattr(data, 'dtype', type(data).__name__)}"
        )
    if data.ndim != 2 or data.shape[1] != row:
        raise DataSourceError(
            f"{str(path)!r}: 'data' must have shape (N, {row}) = 3 channels x {_CIFAR_SIDE}x"
            f"{_CIFAR_SIDE} pixels per row, found shape {data.shape}"
        )
    return data


def _cifar_labels(batch: Mapping[str, Any], key: str, path: Path, count: int) -> np.ndarray:
    if key not in batch:
        raise DataSourceError(f"{str(path)!r} has no {key!r} entry; found keys {sorted(batch)}")
    try:
        labels = np.asarray(batch[key], dtype=np.int64)
    except (TypeError, ValueError) as err:
        raise DataSourceError(f"{str(path)!r}: {key!r} are not integers ({err})") from err
    if labels.ndim != 1 or len(labels) != count:
        raise DataSourceError(
            f"{str(path)!r}: {len(labels.reshape(-1))} {key} for {count} images; every image "
            "needs exactly one label"
        )
    return labels


def _names(meta: Mapping[str, Any], key: str, path: Path) -> tuple[str, ...]:
    names = meta.get(key)
    if not isinstance(names, list | tuple) or not names:
        raise DataSourceError(f"{str(path)!r} has no list {key!r}; found keys {sorted(meta)}")
    return tuple(n.decode("latin1") if isinstance(n, bytes) else str(n) for n in names)


def _restricted_globals() -> dict[tuple[str, str], Any]:
    """The only globals a CIFAR pickle may name: numpy array/scalar rebuilding, plain values."""
    array = np.zeros(1)
    rebuild = type(array).__reduce__(array)[0]
    scalar = np.int64(0).__reduce__()[0]
    frombuffer = array.__reduce_ex__(5)[0]
    allowed: dict[tuple[str, str], Any] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): codecs.encode,
    }
    # Python 2 pickles name the builtins module ``__builtin__``; empty bytes pickle as bytes().
    for module in ("builtins", "__builtin__"):
        for kind in (bytes, bytearray, set, frozenset, complex):
            allowed[(module, kind.__name__)] = kind
    for core in ("numpy.core", "numpy._core"):
        allowed[(f"{core}.multiarray", "_reconstruct")] = rebuild
        allowed[(f"{core}.multiarray", "scalar")] = scalar
        allowed[(f"{core}.numeric", "_frombuffer")] = frombuffer
    return allowed


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that refuses every global outside :func:`_restricted_globals`."""

    allowed = _restricted_globals()

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self.allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"global {module}.{name} is not allowed in a CIFAR data file"
            ) from None


def _read_cifar_pickle(path: Path) -> dict[str, Any]:
    """One CIFAR pickle (latin1, as written by Python 2) as a dict with str keys."""
    if not path.is_file():
        raise DataSourceError(
            f"torchvision CIFAR file {str(path)!r} is missing; the folder must hold the files of "
            "the official archive"
        )
    try:
        with path.open("rb") as handle:
            obj = _RestrictedUnpickler(handle, encoding="latin1").load()
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        IndexError,
        KeyError,
        OSError,
    ) as err:
        raise DataSourceError(
            f"cannot read torchvision CIFAR file {str(path)!r}: {err}; the file is corrupt, "
            "truncated or not a CIFAR pickle"
        ) from err
    if not isinstance(obj, dict):
        raise DataSourceError(
            f"torchvision CIFAR file {str(path)!r} holds a {type(obj).__name__}, expected a dict"
        )
    return {k.decode("latin1") if isinstance(k, bytes) else str(k): v for k, v in obj.items()}
