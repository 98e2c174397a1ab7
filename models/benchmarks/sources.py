"""Where a benchmark's images are read from on this deployment: a local folder, the local copy of
a Hub data set (``certbench datasets fetch``) or the Hub itself, with the definition's pins applied.

Both the work item a worker evaluates (``models.stages.work``) and the data-availability check
(``models.benchmarks.availability``) resolve test sets here, so both read the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.benchmarks.data_pins import pinned_revision
from models.benchmarks.folders import locate_folder
from models.core.settings import Settings
from models.db.entities import TestSet


@dataclass(frozen=True)
class TestSetSpec:
    """How to load one set of images (arguments of ``certbench.data.sources.load_images``)."""

    __test__ = False

    id: int
    name: str
    source: str
    config: str | None
    revision: str | None
    split: str
    subset_skip: int
    subset_limit: int | None
    num_images: int
    band: str | None = None
    sha256: str | None = None
    """The pinned content hash of the data (``models.benchmarks.data_pins``); None: not pinned."""
    hub_commit: str | None = None
    repo: str = ""
    """The Hub id the definition names (also the data set's public name)."""
    folder: str | None = None
    """The definition's ``folder`` as written (``source`` is it resolved); None: read ``repo``."""
    local_copy_of: str | None = None
    """The Hub repo whose local copy ``source`` is (``certbench datasets fetch``), else None."""
    refused: str | None = None
    """Why the definition's ``folder`` must not be read here (it leaves CERTBENCH_DATASETS_DIR,
    ``models.benchmarks.folders``); the worker fails the run with it. None: it may be read."""


@dataclass(frozen=True)
class LocatedSource:
    """Where a set of images is read from on this deployment: ``source`` and ``revision`` are
    the arguments of ``certbench.data.sources.load_images``; ``local_copy_of`` names the Hub repo
    when
    ``source`` is its local copy (read without a revision: the copy is what it is, and a
    ``sha256`` pin says whether it holds the pinned bytes)."""

    source: str
    revision: str | None
    local_copy_of: str | None = None
    refused: str | None = None
    """Why the definition's ``folder`` must not be read (``source`` is then the Hub id, which
    nothing reads: the worker fails the run with this reason first)."""


def locate_source(
    folder: str | None,
    repo: str,
    settings: Settings,
    *,
    revision: str | None = None,
    sha256: str | None = None,
) -> LocatedSource:
    """Where a set of images is read from on this deployment.

    A local folder when the definition names one (relative ones under ``datasets_dir``, refused
    when they lead out of it: ``models.benchmarks.folders.locate_folder``); else the
    local copy of the Hub repo, ``<datasets_dir>/<org>/<name>`` (``certbench datasets fetch``),
    when it exists and either no revision is pinned or a ``sha256`` pin lets the worker verify
    the copy (a copy does not say which revision it holds; its bytes do); else the Hub repo id at
    ``revision``.
    """
    if folder:
        assert settings.datasets_dir is not None  # filled by Settings
        located = locate_folder(folder, settings.datasets_dir)
        if located.path is None or located.refused is not None:
            return LocatedSource(repo, revision, refused=located.refused)
        return LocatedSource(str(located.path), revision)
    if revision is None or sha256 is not None:
        mirror = hub_mirror(repo, settings)
        if mirror is not None and mirror.is_dir():
            return LocatedSource(str(mirror), None, local_copy_of=repo)
    return LocatedSource(repo, revision)


def resolve_source(
    folder: str | None,
    repo: str,
    settings: Settings,
    *,
    revision: str | None = None,
    sha256: str | None = None,
) -> str:
    """The ``source`` of :func:`locate_source`."""
    return locate_source(folder, repo, settings, revision=revision, sha256=sha256).source


def hub_mirror(repo: str, settings: Settings) -> Path | None:
    """``<datasets_dir>/<org>/<name>``: where a local copy of Hub dataset ``repo`` lives, the
    folder ``certbench datasets fetch`` writes (None for a repo that is neither ``org/name`` nor
    an alias such as ``cifar10``)."""
    from certbench.data import mirror_path
    from certbench.errors import DataSourceError

    if settings.datasets_dir is None:
        return None
    try:
        return mirror_path(repo, settings.datasets_dir)
    except DataSourceError:
        return None


def locate_test_set(test_set: TestSet, settings: Settings) -> LocatedSource:
    """Where a test set's images are read from on this deployment (its pins applied)."""
    provenance = test_set.provenance or {}
    revision = pinned_revision(test_set.revision, provenance, name=test_set.name)
    return locate_source(
        test_set.dataset_folder,
        test_set.dataset_repo,
        settings,
        revision=revision,
        sha256=provenance.get("sha256"),
    )


def dataset_source(test_set: TestSet, settings: Settings) -> str:
    """Where a test set's images are read from on this deployment."""
    return locate_test_set(test_set, settings).source


def spec_of_test_set(test_set: TestSet, settings: Settings) -> TestSetSpec:
    """How a worker loads one test set of a benchmark, its pins included."""
    provenance = test_set.provenance or {}
    located = locate_test_set(test_set, settings)
    return TestSetSpec(
        id=test_set.id,
        name=test_set.name,
        source=located.source,
        repo=test_set.dataset_repo,
        folder=test_set.dataset_folder,
        config=test_set.config,
        revision=located.revision,
        split=test_set.split,
        subset_skip=test_set.subset_skip,
        subset_limit=test_set.subset_limit,
        num_images=test_set.num_images,
        band=test_set.band,
        sha256=provenance.get("sha256"),
        hub_commit=provenance.get("hub_commit"),
        local_copy_of=located.local_copy_of,
        refused=located.refused,
    )


def image_source_spec(row: Mapping[str, Any], *, name: str, settings: Settings) -> TestSetSpec:
    """The images a stage's stored block names, resolved against this deployment's folders.

    ``row`` is a stage's stored protocol row: an ``models.benchmarks.definitions.ImageSource`` block
    dumped as JSON plus the subset ``protocol_row`` resolved (``subset_skip``, ``subset_limit``,
    ``num_images``). ``name`` labels the spec (``_<stage>``; it is no test set of the
    benchmark, so ``id`` is 0). The block's own ``provenance`` pins its images exactly as a test
    set's pins a test set (``models.benchmarks.data_pins``): checked by the worker, recorded with
    results.
    """
    pin = row.get("provenance") or {}
    located = locate_source(
        row.get("folder"),
        row["repo"],
        settings,
        revision=pinned_revision(row.get("revision"), pin, name=name),
        sha256=pin.get("sha256"),
    )
    return TestSetSpec(
        id=0,
        name=name,
        source=located.source,
        repo=row["repo"],
        folder=row.get("folder"),
        config=row.get("config"),
        revision=located.revision,
        split=row["split"],
        subset_skip=row["subset_skip"],
        subset_limit=row["subset_limit"],
        num_images=row["num_images"],
        sha256=pin.get("sha256"),
        hub_commit=pin.get("hub_commit"),
        local_copy_of=located.local_copy_of,
        refused=located.refused,
    )
