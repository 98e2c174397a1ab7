"""The exact Hub revisions of the source datasets certbench reads by default, and their bytes.

CIFAR-10 and CIFAR-100 are read from the Hub copies ``uoft-cs/cifar10`` and ``uoft-cs/cifar100``.
A Hub repo's default branch can move, so every place that reads them by default (the packaged
benchmark definitions, ``certbench datasets fetch``, the generators' ``--revision``) names the
commit below instead, and a published set's provenance says which bytes it was built from.

Where the facts come from: each parquet shard is a Git LFS object whose object id *is* the
SHA-256 of its bytes, as the Hub lists it for that commit (``oid sha256:`` of the LFS pointer,
``lfs.sha256`` in the Hub's tree API). The commits and object ids below are pinned the same way by
several independent public code bases and by MTEB's task definitions (``dataset.revision`` of its
CIFAR tasks), which agree on every value. The CIFAR-100 train shard's id is not recorded here:
that split is pinned by commit only.

Standard library only: the commands read this while parsing options.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from certbench.data.names import HUB_ALIASES


@dataclass(frozen=True)
class PinnedSource:
    """A Hub dataset at one commit: ``files`` maps each split to (path in the repo, SHA-256 of
    that parquet shard); a split absent from ``files`` is pinned by the commit alone."""

    repo: str
    commit: str
    files: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    def sha256(self, split: str) -> str | None:
        """The pinned content hash of ``split``'s shard (None: pinned by commit only)."""
        entry = self.files.get(split)
        return entry[1] if entry else None


CIFAR10 = PinnedSource(
    repo="uoft-cs/cifar10",
    commit="0b2714987fa478483af9968de7c934580d0bb9a2",
    files={
        "test": (
            "plain_text/test-00000-of-00001.parquet",
            "841389e6f2d64f28bf17310e430aebac20ec3ba611a3c5e231dc93c645ce84de",
        ),
        "train": (
            "plain_text/train-00000-of-00001.parquet",
            "8428b53a88a11ac374111006708df51469e315a22ac6d66470afd9c78d2ae883",
        ),
    },
)
"""``uoft-cs/cifar10`` at commit 0b27149…; one config ``plain_text``."""

CIFAR100 = PinnedSource(
    repo="uoft-cs/cifar100",
    commit="aadb3af77e9048adbea6b47c21a81e47dd092ae5",
    files={
        "test": (
            "cifar100/test-00000-of-00001.parquet",
            "98776c529bb146a9c791229df74a5cf076be9b43d82dbbd334b6a7788d73dc68",
        ),
    },
)
"""``uoft-cs/cifar100`` at commit aadb3af…; one config ``cifar100`` (test shard 23,772,751
bytes)."""

PINNED_SOURCES: Mapping[str, PinnedSource] = {s.repo: s for s in (CIFAR10, CIFAR100)}


def pinned_source(name: str | Path) -> PinnedSource | None:
    """The pin of a Hub dataset named by id or alias (``cifar10``); None for any other name and
    for an existing local path (a folder called ``cifar10`` is not the Hub repo)."""
    if not isinstance(name, str) or Path(name).expanduser().exists():
        return None
    return PINNED_SOURCES.get(HUB_ALIASES.get(name, name))


def default_revision(source: str | Path, revision: str | None) -> str | None:
    """The revision to read ``source`` at: ``revision`` when given, else the pinned commit of a
    pinned Hub dataset, else None (the default branch, or a local folder)."""
    if revision is not None:
        return revision
    pin = pinned_source(source)
    return pin.commit if pin is not None else None
