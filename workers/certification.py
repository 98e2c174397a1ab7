"""Certify one shard: images ``[start, stop)`` of a test set's protocol subset.

The shard passes the images' global indices (positions in the source split) and the test-set
name to ``certbench.smoothing.certify``, whose per-image random streams derive from
(benchmark seed, test set, image index): any split of a test set into shards gives exactly the
records of one unsharded run. The model and the decoded test sets are cached per worker process,
since consecutive shards almost always belong to the same submission and test set.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import torch
from torch import nn

from certbench.data import ImageSet, Subset, load_images
from certbench.errors import DataSourceError
from certbench.loading import load_manifest, load_model
from certbench.smoothing import CertifyRecord, certify
from models.pipeline import ShardSpec, TestSetSpec, WorkItem
from workers.errors import WorkerConfigError


def resolve_device(configured: str | None) -> torch.device:
    """``CERTBENCH_WORKER_DEVICE`` if set (``cuda:1``, ``cpu``), else the first GPU, else CPU.

    Run one worker process per GPU, each with its own device (or CUDA_VISIBLE_DEVICES).
    """
    if configured is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(configured)
    except RuntimeError as err:
        raise WorkerConfigError(
            f"CERTBENCH_WORKER_DEVICE={configured!r} is not a torch device; use e.g. 'cpu', "
            "'cuda' or 'cuda:1'"
        ) from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise WorkerConfigError(
            f"CERTBENCH_WORKER_DEVICE={configured!r} but CUDA is not available on this machine; "
            "unset it to run on CPU"
        )
    return device


@lru_cache(maxsize=1)
def _cached_model(
    path: str, mtime_ns: int, size: int, manifest_json: str, device: str
) -> nn.Module:
    return load_model(Path(path), load_manifest(manifest_json), device=device)


def model_for(item: WorkItem, device: torch.device) -> nn.Module:
    """The submission's model on ``device``, loaded once per worker process and file version."""
    if item.weights_path is None:
        raise FileNotFoundError(f"submission {item.submission_id} has no stored weights")
    stat = os.stat(item.weights_path)
    manifest_json = load_manifest(item.manifest).canonical_json()
    return _cached_model(
        str(item.weights_path), stat.st_mtime_ns, stat.st_size, manifest_json, str(device)
    )


@lru_cache(maxsize=4)
def images_for(spec: TestSetSpec) -> ImageSet:
    """The protocol subset of a test set, decoded once per worker process.

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


def certify_shard(
    item: WorkItem,
    test_set: TestSetSpec,
    shard: ShardSpec,
    *,
    device: torch.device,
    batch_size: int,
    on_record: Callable[[CertifyRecord], None] | None = None,
) -> list[CertifyRecord]:
    """CERTIFY the shard's images with the benchmark protocol; records in image order."""
    images = images_for(test_set)
    window = slice(shard.start, shard.stop)
    return certify(
        model_for(item, device),
        images.images[window].to(torch.float32).div_(255.0),
        images.labels[window],
        sigma=item.sigma,
        n0=item.n0,
        n=item.n,
        alpha=item.alpha,
        batch_size=batch_size,
        seed=item.seed,
        device=device,
        indices=images.indices[window],
        test_set=test_set.name,
        on_record=on_record,
    )


def records_metadata(item: WorkItem, test_set: TestSetSpec, shard: ShardSpec) -> dict[str, object]:
    """What rides with a shard's parquet file, so it can be traced without the database."""
    return {
        "submission_id": item.submission_id,
        "benchmark": item.benchmark,
        "test_set": test_set.name,
        "shard_index": shard.shard_index,
        "start": shard.start,
        "stop": shard.stop,
        "protocol_version": item.protocol_version,
        "seed": item.seed,
        "n0": item.n0,
        "n": item.n,
        "alpha": item.alpha,
        "sigma": item.sigma,
    }
