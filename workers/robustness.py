"""Attack one robustness shard: images ``[start, stop)`` of a benchmark's clean subset.

Seed 004's protocol on the submission's base classifier (no smoothing): ℓ∞ APGD-CE + APGD-T,
each example then lazily projected into the ℓ∞ ∩ PD ball, and PD-aware APGD; robust accuracy is
the worse of the two. Every image's attacks are seeded from (benchmark seed, "pd", image index),
so any split into shards gives the records of one unsharded run.

The anchor bank is read from ``Settings.anchors_dir``; when the file is absent the worker builds
it once from the training split (greedy k-centre, seeded, a few seconds) and writes it atomically,
so every worker, and every later submission, attacks with the same anchors. Each shard records
the bank's SHA-256, and aggregation refuses shards attacked with different banks.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import torch

from certbench.attacks import RobustnessReport, robust_accuracy
from certbench.data import load_images
from certbench.errors import ThreatModelError
from certbench.pd_threat import AnchorBank, bank_from_image_set, weighted_threat
from certbench.smoothing import derive_seed
from models.pipeline import RobustnessSpec, ShardSpec, WorkItem
from workers.certification import images_for, model_for


def anchor_bank(spec: RobustnessSpec, *, num_classes: int) -> tuple[AnchorBank, str]:
    """The protocol's bank (first ``k`` anchors per class), built and saved when absent, and the
    SHA-256 of the file version it was read from.

    Raises ThreatModelError when the stored bank contradicts the protocol (another seed, fewer
    anchors, other classes): silently attacking with other anchors would change the threat.
    """
    path = spec.anchors_path
    if not path.is_file():
        build_anchor_bank(spec)
    stat = os.stat(path)
    bank, digest = _load_bank(str(path), stat.st_mtime_ns, stat.st_size)
    problems = []
    if bank.seed != spec.anchor_seed:
        problems.append(f"seed {bank.seed} (protocol: {spec.anchor_seed})")
    if bank.k < spec.k:
        problems.append(f"k = {bank.k} per class (protocol: {spec.k})")
    if bank.num_classes != num_classes:
        problems.append(f"{bank.num_classes} classes (benchmark: {num_classes})")
    if problems:
        raise ThreatModelError(
            f"anchor bank {str(path)!r} does not match the benchmark's robustness protocol: "
            f"{'; '.join(problems)}. Delete it to let the worker rebuild it, or build it with "
            f"`certbench anchors build SOURCE --k {spec.k} --seed {spec.anchor_seed} --out {path}`"
        )
    return (bank.truncated(spec.k) if bank.k > spec.k else bank), digest


def build_anchor_bank(spec: RobustnessSpec) -> Path:
    """Select the anchors from the training split and write the bank atomically."""
    train = load_images(
        spec.images.source,
        config=spec.images.config,
        split=spec.anchors_split,
        revision=spec.images.revision,
    )
    bank = bank_from_image_set(
        train,
        dataset=spec.protocol["repo"],
        k=spec.k,
        seed=spec.anchor_seed,
        revision=spec.images.revision,
        split=spec.anchors_split,
    )
    return bank.save(spec.anchors_path)


@lru_cache(maxsize=2)
def _load_bank(path: str, mtime_ns: int, size: int) -> tuple[AnchorBank, str]:
    """Read and hash one file version, once per worker process."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return AnchorBank.load(path), digest.hexdigest()


def robustness_shard(
    item: WorkItem,
    shard: ShardSpec,
    *,
    device: torch.device,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
) -> tuple[RobustnessReport, dict[str, str]]:
    """Attack the shard's images; returns the report and the metadata its file carries."""
    spec = item.robustness
    if spec is None:
        raise ThreatModelError(f"benchmark {item.benchmark!r} has no robustness stage")
    images = images_for(spec.images)
    bank, bank_digest = anchor_bank(spec, num_classes=item.num_classes)
    window = slice(shard.start, shard.stop)
    report = robust_accuracy(
        model_for(item, device),
        images.images[window],
        images.labels[window],
        anchors=weighted_threat(bank, spec.weighting, device=device),
        eps_list=[eps / 255 for eps in spec.eps],
        n_iter=spec.n_iter,
        n_target_classes=spec.n_target_classes,
        seed=derive_seed(item.seed, "pd"),
        batch_size=batch_size,
        device=device,
        indices=images.indices[window],
        pd_projection="exact" if spec.projection == "exact" else "lazy",
        on_batch=on_batch,
    )
    metadata = {
        "submission_id": str(item.submission_id),
        "benchmark": item.benchmark,
        "shard_index": str(shard.shard_index),
        "start": str(shard.start),
        "stop": str(shard.stop),
        "seed": str(item.seed),
        "anchors_sha256": bank_digest,
    }
    return report, metadata
