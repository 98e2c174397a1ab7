"""Write image-classification splits in the Hub layout :func:`certbench.data.sources.load_images`
reads.

One config (``default``) with any number of splits, each one parquet shard
``data/<split>-00000-of-00001.parquet`` with the columns ``image`` (``datasets.Image``: PNG bytes
embedded), ``label`` (``datasets.ClassLabel`` with the class names) and ``source_index``
(int64, the image's position in its source), plus a README.md whose YAML ``configs:`` block names
each split's file — the same layout as ``generators/hub.py`` writes for test sets, kept here so
that code inside ``certbench/`` (which imports nothing above it) can write training data too.
Files are written to a temporary name and renamed, so a crash never leaves a torn shard.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from certbench.errors import DataSourceError

__all__ = ["BENCHMARK_KEY", "shard_name", "write_card", "write_split"]

ROW_GROUP_SIZE = 100
PNG_LEVEL = 6


BENCHMARK_KEY = "certbench_benchmark"
"""Card (README.md YAML) key naming the certbench benchmark a data set belongs to; read by
:func:`certbench.data.folders.card_benchmark` for the manifests ``certbench train`` writes."""


def shard_name(split: str) -> str:
    """File name of a split's single shard, as the Hub names it."""
    return f"{split}-00000-of-00001.parquet"


def _atomic(path: Path, write: Callable[[Path], object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; data files are for everyone to read
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _png(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image, mode="RGB").save(buffer, format="PNG", compress_level=PNG_LEVEL)
    return buffer.getvalue()


def write_split(
    out_dir: Path | str,
    split: str,
    *,
    images: np.ndarray,
    labels: np.ndarray,
    class_names: Sequence[str],
    source_index: np.ndarray,
) -> Path:
    """Write one split (uint8 ``images`` (N, 3, H, W), int ``labels``) as ``data/<split>-*``."""
    from datasets import ClassLabel, Features, Value
    from datasets import Image as ImageFeature

    images = np.asarray(images)
    labels = np.asarray(labels)
    source_index = np.asarray(source_index)
    n = len(images)
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1] != 3:
        raise DataSourceError(
            f"images must be uint8 (N, 3, H, W), got {images.dtype} {images.shape}"
        )
    if labels.shape != (n,) or source_index.shape != (n,):
        raise DataSourceError(
            f"labels and source_index need shape ({n},), got {labels.shape} / {source_index.shape}"
        )
    if n and (labels.min() < 0 or labels.max() >= len(class_names)):
        raise DataSourceError(
            f"labels range over [{labels.min()}, {labels.max()}] but there are "
            f"{len(class_names)} class names"
        )
    features = Features(
        {
            "image": ImageFeature(),
            "label": ClassLabel(names=list(class_names)),
            "source_index": Value("int64"),
        }
    )
    channels_last = images.transpose(0, 2, 3, 1)
    table = pa.Table.from_pydict(
        {
            "image": [{"bytes": _png(image), "path": None} for image in channels_last],
            "label": labels.astype(np.int64),
            "source_index": source_index.astype(np.int64),
        },
        schema=features.arrow_schema,
    )
    path = Path(out_dir) / "data" / shard_name(split)
    _atomic(path, lambda tmp: pq.write_table(table, tmp, row_group_size=ROW_GROUP_SIZE))
    return path


def write_card(
    out_dir: Path | str,
    *,
    splits: Sequence[str],
    pretty_name: str,
    license: str,
    body: str,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """README.md: YAML header (``configs:`` with one ``default`` config) + markdown ``body``."""
    from huggingface_hub import DatasetCard, DatasetCardData

    data = DatasetCardData(
        pretty_name=pretty_name,
        license=license,
        task_categories=["image-classification"],
        configs=[
            {
                "config_name": "default",
                "data_files": [
                    {"split": split, "path": f"data/{shard_name(split)}"} for split in splits
                ],
            }
        ],
        **dict(extra or {}),
    )
    card = DatasetCard(f"---\n{data.to_yaml()}\n---\n\n{body.strip()}\n")
    readme = Path(out_dir) / "README.md"
    _atomic(readme, lambda tmp: tmp.write_text(str(card), encoding="utf-8"))
    return readme
