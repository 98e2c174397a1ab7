"""A worker process's inputs to the stages: the submission's model and decoded images, cached.

Consecutive shards almost always belong to the same submission and test set, so the model (per
weights file version, manifest and device) and the protocol subsets are loaded once per process.
Imported only where a stage runs (it pulls in torch).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from torch import nn

from certbench.data import LOCAL_KINDS, ImageSet, Subset, alias_of, load_images, source_kind
from certbench.errors import DataSourceError, DataUnavailableError
from certbench.nets import load_manifest, load_model
from models.benchmarks.availability import worker_advice
from models.benchmarks.content_hashes import config_content_sha256
from models.benchmarks.data_pins import UNPINNED, VERIFIED_COMMIT, VERIFIED_SHA256
from models.benchmarks.sources import TestSetSpec
from models.core.errors import DatasetMismatchError
from models.stages.work import WorkItem


@lru_cache(maxsize=1)
def _cached_model(
    path: str, mtime_ns: int, size: int, manifest_json: str, device: str
) -> nn.Module:
    return load_model(Path(path), load_manifest(manifest_json), device=device)


def model_for(item: WorkItem, device: object) -> nn.Module:
    """The submission's model on ``device``, loaded once per worker process and file version
    (safetensors only, through ``certbench.nets.loading.load_model``)."""
    if item.weights_path is None:
        raise FileNotFoundError(f"submission {item.submission_id} has no stored weights")
    stat = os.stat(item.weights_path)
    manifest_json = load_manifest(item.manifest).canonical_json()
    return _cached_model(
        str(item.weights_path), stat.st_mtime_ns, stat.st_size, manifest_json, str(device)
    )


def images_for(spec: TestSetSpec) -> ImageSet:
    """The protocol subset of a set of images, decoded once per worker process, after checking
    the bytes against the definition's pin (``data_hashes``; the hash is cached per file
    version, so the check costs a ``stat`` per shard).

    Raises DatasetMismatchError when the data is not what the definition pins, DataSourceError
    when the source is unavailable (worded for the operator, see ``operator_advice``) or its size
    contradicts the benchmark definition (shards would then cover the wrong images).
    """
    data_hashes(spec)
    with operator_advice(spec):
        return _decoded(spec)


@contextmanager
def operator_advice(spec: TestSetSpec) -> Iterator[None]:
    """Turn data missing on this worker into a failure message for the service's operator.

    ``certbench.data.hub_datasets`` advises the person at the command line ("pass a local folder
    instead"); a run's failure is read by the submitter and fixed by the operator, who needs the
    service's remedies (``certbench datasets fetch``, the definition's ``folder``,
    CERTBENCH_DATASETS_DIR) and must not see this machine's paths.
    """
    if spec.refused is not None:  # a folder out of CERTBENCH_DATASETS_DIR is never read
        raise DataSourceError(
            f"test set {spec.name!r}: {spec.refused}; load a definition version whose `folder` "
            "stays in the data directory, then re-run the submission"
        )
    try:
        yield
    except DataUnavailableError as err:
        message = worker_advice(err.problem, repo=spec.repo or err.source, folder=spec.folder)
        raise DataSourceError(f"test set {spec.name!r}: {message}") from err


def data_hashes(spec: TestSetSpec) -> dict[str, str]:
    """What a result records about the data it was computed on, checked against the pin.

    ``sha256``: the content hash of the config's parquet shard(s) (``config_sha256``), for a
    local Hub-layout folder; ``source``/``revision``: the Hub id and revision loaded, or the kind
    of local folder (never its path); for the local copy of a Hub repo, ``source`` is the repo
    and ``copy`` says it was read from a local copy; ``verified``: ``sha256``, ``hub_commit`` or
    ``unpinned``.

    Raises DatasetMismatchError when a pinned hash differs or cannot be checked on this source,
    DataSourceError (worded for the operator) when the source is not here.
    """
    with operator_advice(spec):
        kind, hub_id = source_kind(spec.source)
    out: dict[str, str] = {"source": hub_id if kind == "hub" else LOCAL_KINDS[kind]}
    if kind == "hub":
        out["revision"] = spec.revision or "unpinned"
    if kind == "folder":
        with operator_advice(spec):
            out["sha256"] = config_content_sha256(spec.source, spec.config, spec.split)
        if spec.local_copy_of is not None:
            out.update(source=spec.local_copy_of, copy=LOCAL_KINDS[kind])
    if spec.sha256 is not None:
        if "sha256" not in out:
            if spec.hub_commit is None or kind != "hub":
                raise DatasetMismatchError(
                    f"test set {spec.name!r} pins sha256 {spec.sha256} but its data is read from "
                    f"a {out['source']}, whose content hash cannot be checked: point the "
                    "definition's `folder` at a local Hub-layout copy or pin `hub_commit`"
                )
        elif out["sha256"] != spec.sha256:
            raise DatasetMismatchError(_mismatch_message(spec, out["sha256"]))
        else:
            out["verified"] = VERIFIED_SHA256
    if "verified" not in out:
        out["verified"] = VERIFIED_COMMIT if spec.hub_commit and kind == "hub" else UNPINNED
    return out


def _mismatch_message(spec: TestSetSpec, found: str) -> str:
    """Which bytes differ from which pin, and how to get the pinned bytes back."""
    kind = "test set" if spec.id else "stage images"
    what = f"{kind} {spec.name!r} (config {spec.config!r}, split {spec.split!r})"
    if spec.local_copy_of is not None:
        alias = alias_of(spec.local_copy_of)
        return (
            f"{what}: the local copy of {spec.local_copy_of} on this worker has sha256 {found} "
            f"but the benchmark definition pins {spec.sha256}"
            + (f" (Hub commit {spec.hub_commit})" if spec.hub_commit else "")
            + f"; replace the copy with `certbench datasets fetch {alias} --force`, or remove "
            "it to load the pinned commit from the Hub"
        )
    return (
        f"{what}: the data on this worker has sha256 {found} but the benchmark definition pins "
        f"{spec.sha256}; restore the published files (certbench.data.provenance.config_sha256 "
        "prints a copy's hash) or load a definition version that pins this data "
        "(`certbench benchmarks pin DEFINITION --data FOLDER`)"
    )


@lru_cache(maxsize=4)
def _decoded(spec: TestSetSpec) -> ImageSet:
    images = load_images(
        spec.source,
        config=spec.config,
        split=spec.split,
        revision=spec.revision,
        subset=Subset(skip=spec.subset_skip, limit=spec.subset_limit),
    )
    if len(images) != spec.num_images:
        raise DataSourceError(
            f"test set {spec.name!r} ({spec.repo or 'its data'}, config {spec.config!r}) has "
            f"{len(images)} images in its protocol subset but the benchmark definition says "
            f"{spec.num_images}; fix the definition or the dataset"
        )
    return images


# Tests and tools that rewrite a dataset in place drop the decoded copies with this.
images_for.cache_clear = _decoded.cache_clear  # type: ignore[attr-defined]
