"""A worker process's inputs to the stages: the submission's model and decoded images, cached.

Consecutive shards almost always belong to the same submission and test set, so the model (per
weights file version, manifest and device) and the protocol subsets are loaded once per process.
Imported only where a stage runs (it pulls in torch).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from torch import nn

from certbench.data import ImageSet, Subset, load_images
from certbench.errors import DataSourceError
from certbench.loading import load_manifest, load_model
from models.work import TestSetSpec, WorkItem


@lru_cache(maxsize=1)
def _cached_model(
    path: str, mtime_ns: int, size: int, manifest_json: str, device: str
) -> nn.Module:
    return load_model(Path(path), load_manifest(manifest_json), device=device)


def model_for(item: WorkItem, device: object) -> nn.Module:
    """The submission's model on ``device``, loaded once per worker process and file version
    (safetensors only, through ``certbench.loading.load_model``)."""
    if item.weights_path is None:
        raise FileNotFoundError(f"submission {item.submission_id} has no stored weights")
    stat = os.stat(item.weights_path)
    manifest_json = load_manifest(item.manifest).canonical_json()
    return _cached_model(
        str(item.weights_path), stat.st_mtime_ns, stat.st_size, manifest_json, str(device)
    )


@lru_cache(maxsize=4)
def images_for(spec: TestSetSpec) -> ImageSet:
    """The protocol subset of a set of images, decoded once per worker process.

    Raises DataSourceError when the source is unavailable or its size contradicts the benchmark
    definition (shards would then cover the wrong images).
    """
    images = load_images(
        spec.source,
        config=spec.config,
        split=spec.split,
        revision=spec.revision,
        subset=Subset(skip=spec.subset_skip, limit=spec.subset_limit),
    )
    if len(images) != spec.num_images:
        raise DataSourceError(
            f"test set {spec.name!r} ({spec.source}, config {spec.config!r}) has {len(images)} "
            f"images in its protocol subset but the benchmark definition says "
            f"{spec.num_images}; fix the definition or the dataset"
        )
    return images
