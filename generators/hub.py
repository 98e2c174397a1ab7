"""Hugging Face Hub layout shared by every dataset generator (DESIGN.md §5).

A benchmark folder holds one *config* per test set, each with one ``test`` split stored as one
parquet shard, plus a README.md whose YAML ``configs:`` block lets
``datasets.load_dataset(folder_or_repo, config, split="test")`` and the Hub viewer find them::

    OUT/README.md                                   dataset card (YAML configs + text + figures)
    OUT/images/*.png                                card figures
    OUT/data/<config>/test-00000-of-00001.parquet   image (PNG), label (ClassLabel), metadata...
    OUT/data/<config>/checksum.json                 sha256 + row count + generation metadata

Writer contract (used by cifar_f and the corruption generators):

- ``write_config`` writes the shard to a temporary file, renames it into place, then writes
  ``checksum.json`` the same way. The checksum file is the commit marker: a crash at any point
  leaves a config that ``config_complete`` reports as incomplete, never a half-written set that
  looks complete.
- ``config_complete(out_dir, config, metadata=...)`` re-hashes the shard and compares the
  recorded generation metadata, so resumed runs skip only verified sets made with the same
  parameters.
- ``write_card`` writes README.md atomically from a ``huggingface_hub.DatasetCard``;
  ``build_card`` assembles one with the ``configs:`` block for a list of config names.

Publishing (``generators.hub_publish``) is the other half of the same layout: it uploads
exactly these files and nothing else.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from huggingface_hub import DatasetCard, DatasetCardData
from PIL import Image

from certbench.errors import GeneratorError

SPLIT = "test"
SHARD_NAME = f"{SPLIT}-00000-of-00001.parquet"
CHECKSUM_NAME = "checksum.json"
LAYOUT_VERSION = 1
# Rows per parquet row group: the Hub viewer pages through image datasets by row group, and
# `datasets` itself writes image datasets in groups of 100 rows.
ROW_GROUP_SIZE = 100
# zlib level of the PNG pixel stream (Pillow's compress_level).
PNG_COMPRESS_LEVEL = 1
_CONFIG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_RESERVED_COLUMNS = ("image", "label", "coarse_label", "source_index")


@dataclass
class GenerationReport:
    """What one generation or import run wrote into a Hub-layout folder (for summaries)."""

    out_dir: Path
    written: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    images_written: int = 0
    seconds: float = 0.0


# --------------------------------------------------------------------------------------------
# paths and names


def validate_config_name(config: str) -> str:
    """Config names become folder names and YAML keys: letters, digits, ``_``/``-``, no dots."""
    if not _CONFIG_RE.match(config):
        raise GeneratorError(
            f"config={config!r} is not a valid config name: use letters, digits, '_' or '-' "
            "(no dots, at most 64 characters), e.g. 'fc05_a2_s3' or 'a0p5'."
        )
    return config


def config_dir(out_dir: str | Path, config: str) -> Path:
    """Folder of one config's split files."""
    return Path(out_dir) / "data" / validate_config_name(config)


def shard_path(out_dir: str | Path, config: str) -> Path:
    """The single parquet shard of a config's ``test`` split."""
    return config_dir(out_dir, config) / SHARD_NAME


def checksum_path(out_dir: str | Path, config: str) -> Path:
    """The commit marker written after the shard (see module docstring)."""
    return config_dir(out_dir, config) / CHECKSUM_NAME


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, streamed."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Write via ``write(tmp)`` in the target folder, fsync, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------
# images and features


def encode_png(images: np.ndarray, *, level: int = PNG_COMPRESS_LEVEL) -> list[bytes]:
    """Encode ``(N, H, W, 3)`` uint8 images as 8-bit RGB PNGs with Pillow.

    ``level`` is zlib's level for the pixel stream: CIFAR-F images are noise-like, so deflate
    saves only 0-8 % of the bytes; level 1 keeps most of that at a fraction of the cost.
    """
    _check_images(images)
    return [_png_bytes(image, level) for image in images]


def _png_bytes(image: np.ndarray, level: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image, mode="RGB").save(buffer, format="PNG", compress_level=level)
    return buffer.getvalue()


def _check_images(images: np.ndarray) -> None:
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8:
        got = getattr(images, "dtype", type(images).__name__)
        raise GeneratorError(f"images must be a uint8 numpy array (N, H, W, 3), got {got}.")
    if images.ndim != 4 or images.shape[-1] != 3:
        raise GeneratorError(
            f"images must have shape (N, H, W, 3) (channels last), got {images.shape}; "
            "transpose (N, 3, H, W) tensors with .permute(0, 2, 3, 1)."
        )


def _value_type(name: str, values: np.ndarray) -> datasets.Value:
    kind = values.dtype.kind
    if kind in "iu":
        return datasets.Value(str(values.dtype))
    if kind == "f":
        return datasets.Value("float64" if values.dtype == np.float64 else "float32")
    if kind == "b":
        return datasets.Value("bool")
    if kind in "UO":
        return datasets.Value("string")
    raise GeneratorError(
        f"columns[{name!r}] has dtype {values.dtype}, which the Hub layout cannot store; "
        "use integers, floats, booleans or strings."
    )


def build_features(
    class_names: Sequence[str],
    columns: Mapping[str, np.ndarray],
    coarse_class_names: Sequence[str] | None = None,
) -> datasets.Features:
    """Features in column order: image, label, [coarse_label], metadata columns, source_index."""
    spec: dict[str, Any] = {
        "image": datasets.Image(),
        "label": datasets.ClassLabel(names=list(class_names)),
    }
    if coarse_class_names is not None:
        spec["coarse_label"] = datasets.ClassLabel(names=list(coarse_class_names))
    for name, values in columns.items():
        spec[name] = _value_type(name, np.asarray(values))
    spec["source_index"] = datasets.Value("int64")
    return datasets.Features(spec)


def _check_labels(name: str, labels: np.ndarray, n: int, names: Sequence[str]) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.shape != (n,) or labels.dtype.kind not in "iu":
        raise GeneratorError(
            f"{name} must be an integer array of shape ({n},), got {labels.dtype} {labels.shape}."
        )
    if n and (labels.min() < 0 or labels.max() >= len(names)):
        raise GeneratorError(
            f"{name} range [{labels.min()}, {labels.max()}] does not fit the {len(names)} class "
            f"names; pass the class names of the source dataset."
        )
    return labels.astype(np.int64)


def _build_table(
    images: np.ndarray | Sequence[bytes],
    labels: np.ndarray,
    class_names: Sequence[str],
    columns: Mapping[str, np.ndarray],
    source_index: np.ndarray,
    coarse_labels: np.ndarray | None,
    coarse_class_names: Sequence[str] | None,
) -> pa.Table:
    png = encode_png(images) if isinstance(images, np.ndarray) else list(images)
    n = len(png)
    if any(name in _RESERVED_COLUMNS for name in columns):
        raise GeneratorError(
            f"columns may not use the reserved names {_RESERVED_COLUMNS}; got {sorted(columns)}."
        )
    if (coarse_labels is None) != (coarse_class_names is None):
        raise GeneratorError("coarse_labels and coarse_class_names must be given together.")
    features = build_features(class_names, columns, coarse_class_names)
    data: dict[str, Any] = {
        "image": pa.array(
            [{"bytes": b, "path": None} for b in png],
            type=features.arrow_schema.field("image").type,
        ),
        "label": _check_labels("labels", labels, n, class_names),
    }
    if coarse_labels is not None and coarse_class_names is not None:
        data["coarse_label"] = _check_labels("coarse_labels", coarse_labels, n, coarse_class_names)
    for name, values in columns.items():
        values = np.asarray(values)
        if values.shape != (n,):
            raise GeneratorError(f"columns[{name!r}] has shape {values.shape}, expected ({n},).")
        data[name] = values.astype(str) if values.dtype.kind in "UO" else values
    source_index = np.asarray(source_index)
    if source_index.shape != (n,) or source_index.dtype.kind not in "iu":
        raise GeneratorError(
            f"source_index must be an integer array of shape ({n},), got {source_index.shape}."
        )
    data["source_index"] = source_index.astype(np.int64)
    return pa.Table.from_pydict(data, schema=features.arrow_schema)


# --------------------------------------------------------------------------------------------
# configs: write, verify, list


def write_config(
    out_dir: str | Path,
    config: str,
    *,
    images: np.ndarray | Sequence[bytes],
    labels: np.ndarray,
    class_names: Sequence[str],
    columns: Mapping[str, np.ndarray],
    source_index: np.ndarray,
    coarse_labels: np.ndarray | None = None,
    coarse_class_names: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Write one config's ``test`` split atomically and record its checksum; return the shard.

    Args:
        images: uint8 ``(N, H, W, 3)`` (PNG-encoded here, in threads) or already-encoded PNG bytes.
        labels: int ``(N,)`` indices into ``class_names`` (stored as a ClassLabel ``label``).
        columns: extra per-row metadata, e.g. ``{"f_c": ..., "alpha": ..., "severity": ...}``;
            dtypes map to ``datasets.Value`` (ints keep their width, floats, bools, strings).
        source_index: int ``(N,)`` position of each image in the source split.
        coarse_labels / coarse_class_names: optional second ClassLabel (CIFAR-100 superclasses).
        metadata: JSON-serialisable generation parameters stored in ``checksum.json``; pass the
            same mapping to ``config_complete`` to accept only sets made with those parameters.

    Raises:
        GeneratorError: bad config name, shapes, dtypes, label ranges or reserved column names.
    """
    table = _build_table(
        images, labels, class_names, columns, source_index, coarse_labels, coarse_class_names
    )
    shard = shard_path(out_dir, config)
    marker = checksum_path(out_dir, config)
    marker.unlink(missing_ok=True)  # the set is incomplete from here until the marker is back
    _atomic_write(
        shard,
        lambda tmp: pq.write_table(table, tmp, row_group_size=ROW_GROUP_SIZE, compression="zstd"),
    )
    record = {
        "layout_version": LAYOUT_VERSION,
        "config": config,
        "split": SPLIT,
        "file": SHARD_NAME,
        "sha256": sha256_file(shard),
        "num_rows": table.num_rows,
        "metadata": _jsonable(metadata or {}),
    }
    _atomic_write(marker, lambda tmp: tmp.write_text(json.dumps(record, indent=2, sort_keys=True)))
    return shard


def _jsonable(metadata: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return json.loads(json.dumps(dict(metadata), sort_keys=True))
    except TypeError as err:
        raise GeneratorError(f"metadata must be JSON-serialisable: {err}") from err


def read_checksum(out_dir: str | Path, config: str) -> dict[str, Any] | None:
    """The checksum record of a config, or None when it is missing or unreadable."""
    marker = checksum_path(out_dir, config)
    try:
        record = json.loads(marker.read_text())
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None  # a torn or foreign marker means "not complete"; write_config replaces it
    return record if isinstance(record, dict) else None


def config_complete(
    out_dir: str | Path,
    config: str,
    *,
    metadata: Mapping[str, Any] | None = None,
    verify: bool = True,
) -> bool:
    """True when the config's shard exists, its sha256 matches and (if given) metadata matches."""
    record = read_checksum(out_dir, config)
    if record is None or record.get("layout_version") != LAYOUT_VERSION:
        return False
    shard = shard_path(out_dir, config)
    if not shard.is_file():
        return False
    if metadata is not None and record.get("metadata") != _jsonable(metadata):
        return False
    return not verify or sha256_file(shard) == record.get("sha256")


def list_configs(out_dir: str | Path) -> list[str]:
    """Configs under ``out_dir/data`` that have a checksum record (complete or not verified)."""
    root = Path(out_dir) / "data"
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob(f"*/{CHECKSUM_NAME}"))


# --------------------------------------------------------------------------------------------
# dataset card


def configs_yaml(configs: Iterable[str], *, include_all: bool = False) -> list[dict[str, Any]]:
    """The YAML ``configs:`` entries (one ``test`` split per config, optional ``all``)."""
    entries = [
        {
            "config_name": validate_config_name(name),
            "data_files": [{"split": SPLIT, "path": f"data/{name}/{SPLIT}-*.parquet"}],
        }
        for name in configs
    ]
    if include_all:
        entries.append(
            {
                "config_name": "all",
                "data_files": [{"split": SPLIT, "path": f"data/*/{SPLIT}-*.parquet"}],
            }
        )
    return entries


def build_card(
    *,
    configs: Sequence[str],
    pretty_name: str,
    body: str,
    license: str,
    tags: Sequence[str] = (),
    source_datasets: Sequence[str] = (),
    include_all: bool = False,
) -> DatasetCard:
    """A dataset card whose YAML header lists the configs; ``body`` is the markdown text."""
    data = DatasetCardData(
        pretty_name=pretty_name,
        license=license,
        task_categories=["image-classification"],
        tags=list(tags) or None,
        source_datasets=list(source_datasets) or None,
        size_categories=None,
        configs=configs_yaml(configs, include_all=include_all),
    )
    return DatasetCard(f"---\n{data.to_yaml()}\n---\n\n{body.strip()}\n")


def write_card(out_dir: str | Path, card: DatasetCard) -> Path:
    """Write README.md atomically (the card's YAML + text); figures go under ``images/``."""
    readme = Path(out_dir) / "README.md"
    content = str(card)
    _atomic_write(readme, lambda tmp: tmp.write_text(content, encoding="utf-8"))
    return readme


def figure_path(out_dir: str | Path, name: str) -> Path:
    """Where a card figure lives (``images/<name>``); link it in the card as ``images/<name>``."""
    path = Path(out_dir) / "images" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path
