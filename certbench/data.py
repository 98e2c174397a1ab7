"""Test-set sources: the Hugging Face Hub, local Hub-layout folders and torchvision CIFAR folders.

Every source becomes one validated :class:`ImageSet` (uint8 images, int64 labels, the position of
each image in its source split, class names, metadata columns), so certification, generators and the
service never care where the pixels came from. Decoding is vectorised per image (PIL / numpy, never
per pixel) and only the rows a :class:`Subset` selects are decoded.

Security: the torchvision CIFAR files are Python pickles. They are operator data, but they are still
read through a restricted unpickler that can only rebuild numpy arrays and plain containers.
"""

from __future__ import annotations

import codecs
import io
import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
import yaml
from PIL import Image as PILImage

from certbench.dataset_names import HUB_ALIASES, check_name, is_hub_id
from certbench.errors import DataSourceError, DataUnavailableError

if TYPE_CHECKING:
    from datasets import Dataset, Features

__all__ = [
    "HUB_ALIASES",
    "ImageSet",
    "Subset",
    "list_configs",
    "load_images",
]


SPLITS = ("train", "test")
SOURCE_INDEX = "source_index"
IMAGE_COLUMNS = ("image", "img")
LABEL_COLUMNS = ("label", "fine_label")
COARSE_COLUMN = "coarse_label"
# Encoded image formats accepted in parquet image columns; naming them spares PIL probing every
# plugin for each image (about a quarter of the decode time for 32x32 PNGs).
IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "BMP", "TIFF", "GIF")


def _local_hint(repo: str) -> str:
    """The command-line user's fix for Hub data out of reach (a service gives its own)."""
    return (
        "pass a local folder instead: a folder in the Hub layout (README.md with YAML `configs:` "
        f"and parquet files, e.g. made with `hf download {repo} --repo-type dataset --local-dir "
        "DIR` on a machine with network access) or a torchvision CIFAR folder containing "
        "cifar-10-batches-py/ or cifar-100-python/"
    )


# ----------------------------------------------------------------------------- public types


@dataclass(frozen=True)
class Subset:
    """Which images of a split to use: every ``skip``-th image, then the first ``limit`` of those.

    ``Subset(skip=20)`` on a 10,000-image split gives the 500 images of the smoothing protocol
    (positions 0, 20, 40, ...), the same images Cohen et al.'s ``--skip 20`` certifies.
    """

    skip: int = 1
    limit: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.skip, bool) or not isinstance(self.skip, int) or self.skip < 1:
            raise DataSourceError(f"Subset.skip must be an integer >= 1, got {self.skip!r}")
        if self.limit is not None and (
            isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1
        ):
            raise DataSourceError(
                f"Subset.limit must be None (all) or an integer >= 1, got {self.limit!r}"
            )

    def positions(self, count: int) -> np.ndarray:
        """Positions (int64) selected among ``count`` rows, in increasing order."""
        return np.arange(0, count, self.skip, dtype=np.int64)[: self.limit]


@dataclass(frozen=True, eq=False)
class ImageSet:
    """A labelled test set held in memory, validated on construction.

    ``images`` are uint8 (N, 3, H, W); ``indices`` are the positions of the images in the source
    split (the ``source_index`` column when the source has one), so records of a subset or shard
    can always be traced back to the original image. ``extra`` holds the remaining per-image
    metadata columns (e.g. ``f_c``, ``alpha``, ``eps``, ``severity``, ``corruption``).
    """

    name: str
    images: torch.Tensor
    labels: torch.Tensor
    indices: torch.Tensor
    class_names: tuple[str, ...]
    coarse_labels: torch.Tensor | None = None
    coarse_class_names: tuple[str, ...] | None = None
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        images = self.images
        if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8:
            raise DataSourceError(
                f"ImageSet {self.name!r}: images must be a uint8 tensor, got "
                f"{getattr(images, 'dtype', type(images).__name__)}"
            )
        if images.ndim != 4 or images.shape[1] != 3:
            raise DataSourceError(
                f"ImageSet {self.name!r}: images must have shape (N, 3, H, W), got "
                f"{tuple(images.shape)}"
            )
        object.__setattr__(self, "class_names", tuple(map(str, self.class_names)))
        if self.coarse_class_names is not None:
            object.__setattr__(self, "coarse_class_names", tuple(map(str, self.coarse_class_names)))
        count = images.shape[0]
        if count == 0:
            raise DataSourceError(f"ImageSet {self.name!r} has no images")
        _check_labels(self.name, "labels", self.labels, count, self.class_names)
        _check_vector(self.name, "indices", self.indices, count)
        if (self.coarse_labels is None) != (self.coarse_class_names is None):
            raise DataSourceError(
                f"ImageSet {self.name!r}: coarse_labels and coarse_class_names must be given "
                "together or not at all"
            )
        if self.coarse_labels is not None and self.coarse_class_names is not None:
            _check_labels(
                self.name, "coarse_labels", self.coarse_labels, count, self.coarse_class_names
            )
        for key, values in self.extra.items():
            if len(values) != count:
                raise DataSourceError(
                    f"ImageSet {self.name!r}: extra column {key!r} has {len(values)} values "
                    f"for {count} images"
                )

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def as_float(self) -> torch.Tensor:
        """Images as float32 in [0, 1], the input scale of every certbench model."""
        return self.images.to(torch.float32).div_(255.0)


def _check_vector(name: str, what: str, values: Any, count: int) -> None:
    if not isinstance(values, torch.Tensor) or values.dtype != torch.int64 or values.ndim != 1:
        raise DataSourceError(
            f"ImageSet {name!r}: {what} must be a 1-D int64 tensor, got "
            f"{getattr(values, 'dtype', type(values).__name__)} "
            f"of shape {tuple(getattr(values, 'shape', ()))}"
        )
    if values.shape[0] != count:
        raise DataSourceError(
            f"ImageSet {name!r}: {values.shape[0]} {what} for {count} images; every image needs "
            f"exactly one"
        )


def _check_labels(
    name: str, what: str, labels: Any, count: int, class_names: Sequence[str]
) -> None:
    _check_vector(name, what, labels, count)
    if len(class_names) == 0:
        raise DataSourceError(f"ImageSet {name!r}: no class names for {what}")
    low, high = int(labels.min()), int(labels.max())
    if low < 0 or high >= len(class_names):
        raise DataSourceError(
            f"ImageSet {name!r}: {what} range from {low} to {high} but there are only "
            f"{len(class_names)} class names (valid labels 0..{len(class_names) - 1})"
        )


# ----------------------------------------------------------------------------- entry points


def load_images(
    source: str | Path,
    *,
    config: str | None = None,
    split: str = "test",
    revision: str | None = None,
    subset: Subset | None = None,
) -> ImageSet:
    """Load one split of a test set as an :class:`ImageSet`.

    ``source`` is an existing local path (a Hub-layout folder, or a torchvision CIFAR folder: the
    ``cifar-10-batches-py``/``cifar-100-python`` folder itself or its parent), a Hub dataset id
    (``org/name``), or an alias of :data:`HUB_ALIASES`. ``config`` picks a Hub/folder config (or
    ``cifar10``/``cifar100`` in a torchvision folder holding both); ``revision`` applies to the Hub.

    Raises:
        DataSourceError: the source is missing, unreachable or unreadable, the config or split
            is unknown, or the images/labels do not form a valid set.
    """
    subset = subset or Subset()
    if not isinstance(subset, Subset):
        raise DataSourceError(f"subset must be a certbench.data.Subset, got {subset!r}")
    kind, where = _resolve(source)
    if kind == "hub":
        return _load_hub(str(where), config, split, revision, subset)
    _reject_revision(revision, where)
    if kind == "torchvision":
        return _load_torchvision(Path(where), config, split, subset)
    return _load_folder(Path(where), config, split, subset)


def list_configs(source: str | Path, revision: str | None = None) -> list[str]:
    """Names of the configs (test sets) a source offers, in the order the source lists them.

    Raises:
        DataSourceError: as :func:`load_images`.
    """
    kind, where = _resolve(source)
    if kind == "hub":
        return _hub_configs(str(where), revision)
    _reject_revision(revision, where)
    if kind == "torchvision":
        return list(_torchvision_dirs(Path(where)))
    return list(_folder_configs(Path(where)))


def source_kind(source: str | Path) -> tuple[str, str]:
    """("hub", repo id) for a Hub source; ("torchvision", "") or ("folder", "") for local ones.

    The local path itself is never returned, so callers can publish the result.

    Raises:
        DataSourceError: as :func:`load_images`.
    """
    kind, where = _resolve(source)
    return kind, str(where) if kind == "hub" else ""


def config_files(folder: str | Path, config: str | None = None, split: str = "test") -> list[Path]:
    """The data files (parquet) of one config's split in a local Hub-layout folder, in order.

    Raises:
        DataSourceError: not a Hub-layout folder, unknown config or split, missing files.
    """
    kind, where = _resolve(folder)
    if kind != "folder":
        raise DataSourceError(
            f"{str(folder)!r} is not a local Hub-layout folder (README.md with `configs:` and "
            "parquet files); content hashes are defined for that layout only"
        )
    path = Path(where)
    configs = _folder_configs(path)
    chosen = _choose_config(path, configs, config)
    if split not in configs[chosen]:
        raise DataSourceError(
            f"unknown split {split!r} for config {chosen!r} in {str(folder)!r}; available: "
            f"{sorted(configs[chosen])}"
        )
    return _glob_files(path, chosen, split, configs[chosen][split])


def _reject_revision(revision: str | None, where: Path | str) -> None:
    if revision is not None:
        raise DataSourceError(
            f"revision={revision!r} only applies to Hub datasets, but {str(where)!r} is a local "
            "folder; drop the revision or check out that revision locally"
        )


def _resolve(source: str | Path) -> tuple[str, Path | str]:
    """Classify ``source`` as ("hub", repo id), ("torchvision", dir) or ("folder", dir)."""
    if not isinstance(source, str | Path):
        raise DataSourceError(f"dataset source must be a path or a Hub id, got {source!r}")
    path = Path(source).expanduser()
    if isinstance(source, str) and not path.exists():
        if source in HUB_ALIASES:
            return "hub", HUB_ALIASES[source]
        if is_hub_id(source):
            return "hub", source
        check_name(source)
    if not path.exists():
        raise DataUnavailableError(
            f"dataset source {str(source)!r} does not exist",
            advice="",
            source=str(source),
            hub=False,
        )
    if not path.is_dir():
        raise DataSourceError(
            f"dataset source {str(source)!r} is a file; pass the folder that holds the dataset "
            "(a Hub-layout folder with README.md, or a torchvision CIFAR folder)"
        )
    if _torchvision_dirs(path):
        return "torchvision", path
    if (path / "README.md").is_file() or next(path.rglob("*.parquet"), None) is not None:
        return "folder", path
    raise DataSourceError(
        f"folder {str(source)!r} is not a dataset: expected README.md with YAML `configs:` and "
        "parquet files (Hub layout), or cifar-10-batches-py/ or cifar-100-python/ (torchvision "
        "layout)"
    )


# ----------------------------------------------------------------------------- torchvision CIFAR


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


def _torchvision_dirs(path: Path) -> dict[str, Path]:
    """The torchvision CIFAR folders found at ``path`` (the folder itself or its children)."""
    found = {}
    for name, layout in _CIFAR_LAYOUTS.items():
        if path.name == layout.folder:
            found[name] = path
        elif (path / layout.folder).is_dir():
            found[name] = path / layout.folder
    return found


def _load_torchvision(path: Path, config: str | None, split: str, subset: Subset) -> ImageSet:
    dirs = _torchvision_dirs(path)
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
    positions = _positions(subset, len(data), f"{config}/{split}")
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


# ----------------------------------------------------------------------------- Hub-layout folders


def _folder_configs(folder: Path) -> dict[str, dict[str, list[str]]]:
    """Config name -> split -> data file patterns, from README.md's YAML ``configs:``.

    Without a ``configs:`` section the folder is one ``default`` config whose split files are
    named ``<split>.parquet`` or ``<split>-*.parquet`` (the names ``Dataset.to_parquet`` and the
    Hub use). Patterns are resolved only for the config being loaded, so one broken config
    never blocks the others.
    """
    entries = _readme_configs(folder)
    if not entries:
        splits = {
            split: sorted(
                str(p.relative_to(folder))
                for p in folder.rglob("*.parquet")
                if p.stem == split or p.stem.startswith(f"{split}-")
            )
            for split in SPLITS
        }
        splits = {s: files for s, files in splits.items() if files}
        if not splits:
            raise DataSourceError(
                f"folder {str(folder)!r} has no `configs:` in README.md and no parquet files "
                "named <split>.parquet or <split>-*.parquet"
            )
        return {"default": splits}
    configs: dict[str, dict[str, list[str]]] = {}
    for entry in entries:
        name = entry.get("config_name", "default") if isinstance(entry, dict) else None
        if not isinstance(name, str) or "data_files" not in entry:
            raise DataSourceError(
                f"{str(folder / 'README.md')!r}: every `configs:` entry needs `config_name` and "
                f"`data_files`, found {entry!r}"
            )
        configs[name] = _split_patterns(entry["data_files"], folder, name)
    return configs


def _readme_configs(folder: Path) -> list[Any]:
    readme = folder / "README.md"
    if not readme.is_file():
        return []
    from huggingface_hub.repocard import metadata_load

    try:
        metadata = metadata_load(readme) or {}
    except (yaml.YAMLError, UnicodeDecodeError, ValueError) as err:
        raise DataSourceError(f"cannot parse the YAML header of {str(readme)!r}: {err}") from err
    configs = metadata.get("configs", [])
    if not isinstance(configs, list):
        raise DataSourceError(
            f"{str(readme)!r}: `configs:` must be a list of entries, found {configs!r}"
        )
    return configs


def _split_patterns(data_files: Any, folder: Path, config: str) -> dict[str, list[str]]:
    """Normalise the forms ``data_files`` takes in a dataset card to split -> patterns."""

    def as_list(value: Any) -> list[str]:
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise DataSourceError(
                f"{str(folder / 'README.md')!r}: config {config!r} has a malformed data_files "
                f"entry {value!r}; expected a path pattern or a list of them"
            )
        return values

    if isinstance(data_files, str) or (
        isinstance(data_files, list) and all(isinstance(v, str) for v in data_files)
    ):
        return {"train": as_list(data_files)}
    if isinstance(data_files, dict):
        return {str(split): as_list(value) for split, value in data_files.items()}
    if isinstance(data_files, list):
        out: dict[str, list[str]] = {}
        for item in data_files:
            if not isinstance(item, dict) or "path" not in item:
                raise DataSourceError(
                    f"{str(folder / 'README.md')!r}: config {config!r} has a data_files item "
                    f"{item!r}; expected `split:` and `path:`"
                )
            out.setdefault(str(item.get("split", "train")), []).extend(as_list(item["path"]))
        return out
    raise DataSourceError(
        f"{str(folder / 'README.md')!r}: config {config!r} has data_files {data_files!r}; "
        "expected a pattern, a list, or a list of {split, path}"
    )


def _glob_files(folder: Path, config: str, split: str, patterns: list[str]) -> list[Path]:
    root = folder.resolve()
    files: list[Path] = []
    for pattern in patterns:
        matches = sorted(p for p in folder.glob(pattern) if p.is_file())
        if not matches:
            raise DataSourceError(
                f"config {config!r} split {split!r}: data file pattern {pattern!r} matches no "
                f"file in {str(folder)!r}"
            )
        for match in matches:
            if not match.resolve().is_relative_to(root):
                raise DataSourceError(
                    f"config {config!r}: data file {str(match)!r} lies outside the dataset "
                    f"folder {str(folder)!r}"
                )
            if match.suffix != ".parquet":
                raise DataSourceError(
                    f"config {config!r}: data file {str(match)!r} is not parquet; certbench reads "
                    "Hub-layout folders made of parquet files"
                )
        files.extend(matches)
    return files


def _load_folder(folder: Path, config: str | None, split: str, subset: Subset) -> ImageSet:
    configs = _folder_configs(folder)
    config = _choose_config(folder, configs, config)
    splits = configs[config]
    if split not in splits:
        raise DataSourceError(
            f"unknown split {split!r} for config {config!r} in {str(folder)!r}; available: "
            f"{sorted(splits)}"
        )
    files = _glob_files(folder, config, split, splits[split])
    try:
        tables = [pq.read_table(path) for path in files]
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    except (pa.ArrowException, OSError) as err:
        raise DataSourceError(
            f"cannot read the parquet files of config {config!r} split {split!r} in "
            f"{str(folder)!r}: {err}"
        ) from err
    from datasets import Features

    name = f"{folder.name}/{config}/{split}"
    positions = _positions(subset, table.num_rows, name)
    return _image_set_from_rows(
        table.take(pa.array(positions)),
        Features.from_arrow_schema(tables[0].schema),
        name=name,
        positions=positions,
    )


def _choose_config(folder: Path, configs: Mapping[str, Any], config: str | None) -> str:
    if config is None:
        if len(configs) == 1:
            return next(iter(configs))
        raise DataSourceError(
            f"{str(folder)!r} has {len(configs)} configs; choose one with config=, one of "
            f"{list(configs)}"
        )
    if config not in configs:
        raise DataSourceError(
            f"unknown config {config!r} in {str(folder)!r}; available: {list(configs)}"
        )
    return config


# ----------------------------------------------------------------------------- Hugging Face Hub


def _hub_call(repo: str, what: str, call: Callable[[], Any]) -> Any:
    """Run a ``datasets`` call against the Hub, turning its failures into DataSourceError."""
    from datasets.exceptions import DatasetNotFoundError

    try:
        return call()
    except ConnectionError as err:
        raise DataUnavailableError(
            f"could not reach the Hugging Face Hub to {what} {repo!r} ({err}); no local path "
            f"{repo!r} exists either",
            advice=f"without network access, {_local_hint(repo)}",
            source=repo,
            hub=True,
        ) from err
    except DatasetNotFoundError as err:
        raise DataUnavailableError(
            f"Hub dataset {repo!r} was not found or is not accessible ({err})",
            advice=f"check the id, log in for gated/private data, or {_local_hint(repo)}",
            source=repo,
            hub=True,
        ) from err
    except Exception as err:  # datasets raises many types (ValueError for bad config/split, ...)
        raise DataSourceError(f"cannot {what} Hub dataset {repo!r}: {err}") from err


def _hub_configs(repo: str, revision: str | None) -> list[str]:
    import datasets

    return list(
        _hub_call(
            repo,
            "list the configs of",
            lambda: datasets.get_dataset_config_names(repo, revision=revision),
        )
    )


def _load_hub(
    repo: str, config: str | None, split: str, revision: str | None, subset: Subset
) -> ImageSet:
    import datasets

    ds: Dataset = _hub_call(
        repo,
        "load",
        lambda: datasets.load_dataset(repo, config, split=split, revision=revision),
    )
    positions = _positions(subset, len(ds), f"{repo}/{split}")
    rows = ds.select(positions).with_format("arrow")[:]
    config_name = ds.info.config_name or config or "default"
    return _image_set_from_rows(
        rows, ds.features, name=f"{repo}/{config_name}/{split}", positions=positions
    )


# ----------------------------------------------------------------------------- arrow -> ImageSet


def _positions(subset: Subset, count: int, what: str) -> np.ndarray:
    positions = subset.positions(count)
    if len(positions) == 0:
        raise DataSourceError(
            f"{what} has {count} images, so {subset} selects none; use a non-empty split"
        )
    return positions


def _image_set_from_rows(
    table: pa.Table, features: Features, *, name: str, positions: np.ndarray
) -> ImageSet:
    """Decode the selected rows of a split; ``positions`` are their places in the split."""
    image_col = _image_column(table, features, name)
    label_col = next((c for c in LABEL_COLUMNS if c in table.column_names), None)
    if label_col is None:
        raise DataSourceError(
            f"{name}: no label column (one of {list(LABEL_COLUMNS)}); columns are "
            f"{table.column_names}"
        )
    images = _decode_images(table.column(image_col), name)
    labels, class_names = _class_labels(table, features, label_col, name)
    coarse = coarse_names = None
    if COARSE_COLUMN in table.column_names:
        coarse, coarse_names = _class_labels(table, features, COARSE_COLUMN, name)
    if SOURCE_INDEX in table.column_names:
        indices = _int_column(table, SOURCE_INDEX, name)
    else:
        indices = torch.from_numpy(positions)
    used = {image_col, label_col, COARSE_COLUMN, SOURCE_INDEX}
    extra = {
        col: table.column(col).to_numpy(zero_copy_only=False)
        for col in table.column_names
        if col not in used
    }
    return ImageSet(
        name=name,
        images=images,
        labels=labels,
        indices=indices,
        class_names=class_names,
        coarse_labels=coarse,
        coarse_class_names=coarse_names,
        extra=extra,
    )


def _image_column(table: pa.Table, features: Features, name: str) -> str:
    from datasets import Image

    candidates = [c for c, f in features.items() if isinstance(f, Image)]
    candidates += [c for c in IMAGE_COLUMNS if c in table.column_names and c not in candidates]
    for col in candidates:
        kind = table.schema.field(col).type
        if pa.types.is_struct(kind) and kind.get_field_index("bytes") >= 0:
            return col
    raise DataSourceError(
        f"{name}: no image column (an Image feature named one of {list(IMAGE_COLUMNS)}); "
        f"columns are {table.column_names}"
    )


def _class_labels(
    table: pa.Table, features: Features, col: str, name: str
) -> tuple[torch.Tensor, tuple[str, ...]]:
    from datasets import ClassLabel

    feature = features.get(col)
    if not isinstance(feature, ClassLabel) or not feature.names:
        raise DataSourceError(
            f"{name}: column {col!r} has no class names (feature {feature!r}); it must be a "
            "ClassLabel(names=[...]) feature, as written by datasets"
        )
    return _int_column(table, col, name), tuple(feature.names)


def _int_column(table: pa.Table, col: str, name: str) -> torch.Tensor:
    column = table.column(col)
    if column.null_count or not pa.types.is_integer(column.type):
        raise DataSourceError(
            f"{name}: column {col!r} must hold integers without gaps, found type "
            f"{column.type} with {column.null_count} missing values"
        )
    return torch.from_numpy(column.to_numpy().astype(np.int64, copy=False).copy())


def _decode_images(column: pa.ChunkedArray, name: str) -> torch.Tensor:
    """Decode a column of encoded images (datasets' Image struct) into uint8 (N, 3, H, W).

    PIL decodes each image straight into one preallocated array (no per-pixel Python); one
    transpose at the end gives the channels-first layout.
    """
    blobs = pc.struct_field(column.combine_chunks(), "bytes")
    if blobs.null_count:
        row = pc.index(pc.is_null(blobs), True).as_py()
        raise DataSourceError(
            f"{name}: image at row {row} has no embedded bytes; certbench needs the image "
            "bytes inside the parquet file (datasets' Image feature embeds them)"
        )
    encoded = blobs.to_pylist()
    first = _decode_one(encoded[0], 0, name)
    out = np.empty((len(encoded), *first.shape), dtype=np.uint8)
    out[0] = first
    for row in range(1, len(encoded)):
        pixels = _decode_one(encoded[row], row, name)
        if pixels.shape != first.shape:
            raise DataSourceError(
                f"{name}: image at row {row} is {pixels.shape[1]}x{pixels.shape[0]} but the "
                f"first is {first.shape[1]}x{first.shape[0]}; all images of a set must share "
                "one size"
            )
        out[row] = pixels
    return torch.from_numpy(np.ascontiguousarray(out.transpose(0, 3, 1, 2)))


def _decode_one(blob: bytes, row: int, name: str) -> np.ndarray:
    """One image as uint8 (H, W, 3); anything but 8-bit RGB is refused, never converted."""
    try:
        with PILImage.open(io.BytesIO(blob), formats=IMAGE_FORMATS) as opened:
            image: PILImage.Image = opened
            if image.mode == "P" and image.palette is not None and image.palette.mode == "RGB":
                image = image.convert("RGB")  # lossless: a palette of RGB colours
            if image.mode != "RGB":
                raise DataSourceError(
                    f"{name}: image at row {row} has mode {image.mode} "
                    f"({len(image.getbands())} channel(s)); images must be 3-channel 8-bit RGB, "
                    "i.e. (3, H, W) uint8"
                )
            return np.asarray(image)
    except (OSError, SyntaxError, ValueError) as err:
        raise DataSourceError(f"{name}: cannot decode the image at row {row}: {err}") from err
