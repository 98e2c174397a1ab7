"""The PD robustness stage's protocol: its definition block, the block resolved against this
deployment's folders, and the anchor bank it attacks with (``models.stages.pd_robustness.stage``).

The anchor bank is read from ``Settings.anchors_dir``; when the file is absent the first shard
builds it from the training split (greedy k-centre, seeded) and writes it atomically, so every
worker and every later submission attack with the same anchors. Each shard records the bank's
SHA-256, and merging refuses shards attacked with different banks.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, model_validator

from models.benchmarks.definitions import MAX_CLASSES, ImageSource, Seed
from models.benchmarks.sources import image_source_spec
from models.core.settings import Settings
from models.stages.base import StageSpec

if TYPE_CHECKING:
    from certbench.pd import AnchorBank

#: Bounds: anchors per class (the bank is k × classes images in memory) and attack iterations.
MAX_ANCHORS = 10_000
MAX_ITERATIONS = 100_000
_ALL_EPS: list[Literal[8, 16]] = [8, 16]
#: Fields of the resolved protocol (``RobustnessSpec``) taken from the stored row as they are.
AS_STORED = ("anchors_split", "k", "anchor_seed", "n_iter", "n_target_classes", "projection",
             "weighting")  # fmt: skip


class RobustnessProtocol(ImageSource):
    """Definition block ``stages.pd_robustness`` (also accepted as top-level ``robustness``).

    Attacks the benchmark's clean test subset (``repo``/``folder``, every ``skip``-th image) at
    each ε in ``eps`` (units of 1/255; the leaderboard has columns for 8 and 16). The anchor bank
    (k per class, greedy farthest-first with ``anchor_seed``) comes from ``anchors`` under the
    service's anchors folder, built from the training split ``anchors_split`` of the same source
    on first use when the file is absent. ``weighting`` ``pdw`` is PD-W (CIFAR-100 superclasses).
    """

    anchors: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}\.safetensors$")]
    anchors_split: str = "train"
    k: int = Field(default=50, gt=0, le=MAX_ANCHORS)
    anchor_seed: Seed = 0
    eps: list[Literal[8, 16]] = Field(default_factory=lambda: _ALL_EPS.copy(), min_length=1)
    n_iter: int = Field(default=100, gt=0, le=MAX_ITERATIONS)
    n_target_classes: int = Field(default=9, ge=0, le=MAX_CLASSES)
    projection: Literal["exact", "lazy"] = "exact"
    weighting: Literal["pd", "pdw"] = "pd"

    @model_validator(mode="after")
    def _distinct_eps(self) -> RobustnessProtocol:
        if len(set(self.eps)) != len(self.eps):
            raise ValueError(f"robustness.eps repeats a radius: {self.eps}")
        return self


@dataclass(frozen=True)
class RobustnessSpec(StageSpec):
    """The stored protocol resolved against this deployment's folders: ``images`` is the
    attacked clean subset, ``anchors_path`` the bank file (built from the same source's
    ``anchors_split`` when absent)."""

    anchors_path: Path
    anchors_split: str
    k: int
    anchor_seed: int
    eps: tuple[int, ...]
    n_iter: int
    n_target_classes: int
    projection: str
    weighting: str


def robustness_spec(protocol: Mapping[str, Any], settings: Settings) -> RobustnessSpec:
    """Resolve a benchmark's stored robustness protocol against this deployment's folders."""
    assert settings.anchors_dir is not None  # filled by Settings' validator
    return RobustnessSpec(
        images=image_source_spec(protocol, name="_robustness", settings=settings),
        row=dict(protocol),
        anchors_path=settings.anchors_dir / protocol["anchors"],
        eps=tuple(protocol["eps"]),
        **{key: protocol[key] for key in AS_STORED},
    )


def anchor_bank(spec: RobustnessSpec, *, num_classes: int) -> tuple[AnchorBank, str]:
    """The protocol's bank (first ``k`` anchors per class), built and saved when absent, and the
    SHA-256 of the file version it was read from.

    Raises ThreatModelError when the stored bank contradicts the protocol (another seed, fewer
    anchors, other classes): silently attacking with other anchors would change the threat.
    """
    from certbench.errors import ThreatModelError

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
    from certbench.data import load_images
    from certbench.pd import bank_from_image_set
    from models.stages.inputs import operator_advice

    with operator_advice(spec.images):
        train = load_images(
            spec.images.source,
            config=spec.images.config,
            split=spec.anchors_split,
            revision=spec.images.revision,
        )
    bank = bank_from_image_set(
        train,
        dataset=spec.row["repo"],
        k=spec.k,
        seed=spec.anchor_seed,
        revision=spec.images.revision,
        split=spec.anchors_split,
    )
    return bank.save(spec.anchors_path)


@lru_cache(maxsize=2)
def _load_bank(path: str, mtime_ns: int, size: int) -> tuple[AnchorBank, str]:
    """Read and hash one file version, once per worker process."""
    from certbench.pd import AnchorBank

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return AnchorBank.load(path), digest.hexdigest()
