"""A CIFAR-F generation run: load and validate the clean test set, write every test set as a
Hub config (skipping verified ones), then the dataset card.

The maths lives in :mod:`generators.cifar_f`, the card in :mod:`generators.cifar_f_card`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from certbench.data import ImageSet, Subset, load_images
from certbench.errors import GeneratorError
from generators import hub
from generators.cifar_f import (
    GENERATOR_VERSION,
    NUM_CLASSES,
    SIZE,
    CifarFSpec,
    Protocol,
    perturb_batch,
    set_stream_key,
)
from generators.cifar_f_card import write_cifar_f_card


def _validate_source(images: ImageSet, dataset: str) -> None:
    if tuple(images.images.shape[1:]) != (3, SIZE, SIZE):
        raise GeneratorError(
            f"source images have shape {tuple(images.images.shape[1:])}; CIFAR-F needs "
            f"(3, {SIZE}, {SIZE}) CIFAR test images."
        )
    expected = NUM_CLASSES[dataset]
    if len(images.class_names) != expected:
        raise GeneratorError(
            f"source {images.name!r} has {len(images.class_names)} classes but --dataset "
            f"{dataset} needs {expected}; pass the matching --dataset or source."
        )


def source_fingerprint(images: ImageSet) -> str:
    """sha256 over pixels, labels and indices: pins the exact source content in the card."""
    digest = hashlib.sha256()
    for tensor in (images.images, images.labels, images.indices):
        digest.update(tensor.contiguous().numpy().tobytes())
    digest.update("\x1f".join(images.class_names).encode())
    return digest.hexdigest()


def load_source(
    dataset: str, source: str | Path | None, *, revision: str | None, limit: int | None
) -> ImageSet:
    """The clean test split, validated for CIFAR-F (default source: the Hub copy of ``dataset``)."""
    if dataset not in NUM_CLASSES:
        raise GeneratorError(f"dataset={dataset!r} is unknown; use one of {sorted(NUM_CLASSES)}.")
    images = load_images(
        source if source is not None else dataset,
        split="test",
        revision=revision,
        subset=Subset(limit=limit),
    )
    _validate_source(images, dataset)
    return images


ProgressHook = Callable[[str, int, int], None]
"""``hook(config, done_images, total_images)`` after every batch (for progress bars)."""


def generate(
    images: ImageSet,
    out_dir: str | Path,
    specs: Sequence[CifarFSpec],
    *,
    dataset: str,
    protocol: Protocol = Protocol.PAPER,
    seed: int = 0,
    batch_size: int = 1000,
    source_info: dict[str, Any] | None = None,
    progress: ProgressHook | None = None,
    card: bool = True,
    threads: int | None = None,
) -> hub.GenerationReport:
    """Write every test set in ``specs`` as a Hub config under ``out_dir``; skip verified ones.

    With ``card`` the folder's README.md (YAML ``configs:`` for ``specs``, protocol text,
    figures) is (re)written at the end, so the folder loads with ``datasets.load_dataset``.
    A config is skipped only if its checksum verifies *and* it was made with the same protocol,
    seed, dataset and source content, so a resumed run never mixes parameters.

    ``threads`` sets torch's intra-op threads for the run (restored afterwards). The FFT work
    is small per call, so on few cores one compute thread plus the background PNG/parquet
    writer beats several OpenMP threads that contend for the same cores.
    """
    previous_threads = torch.get_num_threads()
    if threads is not None:
        if threads < 1:
            raise GeneratorError(f"threads must be >= 1, got {threads}.")
        torch.set_num_threads(threads)
    try:
        return _generate(
            images,
            Path(out_dir),
            specs,
            dataset=dataset,
            protocol=protocol,
            seed=seed,
            batch_size=batch_size,
            source_info=source_info,
            progress=progress,
            card=card,
        )
    finally:
        torch.set_num_threads(previous_threads)


def _generate(
    images: ImageSet,
    out: Path,
    specs: Sequence[CifarFSpec],
    *,
    dataset: str,
    protocol: Protocol,
    seed: int,
    batch_size: int,
    source_info: dict[str, Any] | None,
    progress: ProgressHook | None,
    card: bool,
) -> hub.GenerationReport:
    report = hub.GenerationReport(out_dir=out)
    started = time.perf_counter()
    fingerprint = source_fingerprint(images)
    base_meta = {
        "generator": "cifar_f",
        "generator_version": GENERATOR_VERSION,
        "dataset": dataset,
        "protocol": protocol.value,
        "seed": int(seed),
        "num_images": len(images),
        "source_sha256": fingerprint,
        **(source_info or {}),
    }
    indices = images.indices
    # Encoding PNGs and writing parquet overlaps with the FFTs of the next test set (torch and
    # zlib both release the GIL); at most one set waits, and a write error surfaces at the
    # next set or at the end. Each write stays atomic, so a crash never leaves a "complete"
    # half-written set.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="cifar-f-writer") as writer:
        pending: Future[Path] | None = None
        for spec in specs:
            meta = {
                **base_meta,
                "f_c": spec.f_c,
                "alpha": spec.alpha,
                "eps": spec.eps,
                "severity": spec.severity,
            }
            if hub.config_complete(out, spec.name, metadata=meta):
                report.skipped.append(spec.name)
                if progress:
                    progress(spec.name, len(images), len(images))
                continue
            key = set_stream_key(seed, dataset, protocol, spec)
            corrupted = torch.empty_like(images.images)
            for start in range(0, len(images), batch_size):
                stop = min(start + batch_size, len(images))
                corrupted[start:stop] = perturb_batch(
                    images.images[start:stop], indices[start:stop], spec, protocol=protocol, key=key
                )
                if progress:
                    progress(spec.name, stop, len(images))
            if pending is not None:
                pending.result()
            pending = writer.submit(_write_set, out, images, spec, corrupted, meta)
            report.written.append(spec.name)
            report.images_written += len(images)
        if pending is not None:
            pending.result()
    if card:
        write_cifar_f_card(
            out,
            images,
            specs,
            dataset=dataset,
            protocol=protocol,
            seed=seed,
            source={**(source_info or {}), "source_sha256": fingerprint},
        )
    report.seconds = time.perf_counter() - started
    return report


def _write_set(
    out: Path, images: ImageSet, spec: CifarFSpec, corrupted: torch.Tensor, meta: dict[str, Any]
) -> Path:
    """One test set as a Hub config: corrupted pixels plus the clean set's labels and indices."""
    n = len(images)
    return hub.write_config(
        out,
        spec.name,
        images=corrupted.permute(0, 2, 3, 1).contiguous().numpy(),
        labels=images.labels.numpy(),
        class_names=images.class_names,
        coarse_labels=images.coarse_labels.numpy() if images.coarse_labels is not None else None,
        coarse_class_names=images.coarse_class_names,
        columns={
            "f_c": np.full(n, spec.f_c, dtype=np.int32),
            "alpha": np.full(n, spec.alpha, dtype=np.float32),
            "eps": np.full(n, spec.eps, dtype=np.float32),
            "severity": np.full(n, spec.severity, dtype=np.int32),
        },
        source_index=images.indices.numpy(),
        metadata=meta,
    )
