"""Data sets the service builds itself, deterministically, wherever it finds them missing.

The demo benchmark's images (scikit-learn's handwritten digits, ``certbench.data.demo``) ship
with the package as code, not files: ``certbench serve`` writes them into
``<datasets_dir>/demo-digits`` when it prepares the service, and a worker that finds the folder
missing (a fleet worker on another machine, a wiped disk) writes it before it reads it, so no
worker ever fails for want of them. The benchmark definition pins the content hash of the test
split, so a copy that differs (edited, or written by other library versions) is still caught by
the workers' pin check (``models.stages.inputs.data_hashes``) instead of silently certified.

A folder is written under a temporary name and renamed into place: concurrent writers (several
workers starting at once) never expose a half-written folder, and the loser of the race removes
its own copy.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from models.benchmarks.sources import TestSetSpec
from models.core.settings import Settings

log = logging.getLogger(__name__)


def _write_demo_digits(out: Path) -> None:
    from certbench.data import write_demo_dataset

    write_demo_dataset(out)


@dataclass(frozen=True)
class GeneratedDataset:
    """A folder under ``datasets_dir`` that ``write`` can always rebuild from installed code.

    ``repo`` is the name definitions give it (published nowhere); ``command`` the CLI command
    that writes it into a definition's folder (``{folder}``), for a definition that names it
    under another folder than ``name``, which the service does not write by itself.
    """

    name: str
    repo: str
    description: str
    command: str
    write: Callable[[Path], None]


GENERATED: dict[str, GeneratedDataset] = {
    "demo-digits": GeneratedDataset(
        name="demo-digits",
        repo="certbench/demo-digits",
        description="scikit-learn's handwritten digits as 32×32 RGB (certbench datasets demo)",
        command="certbench datasets demo --folder {folder}",
        write=_write_demo_digits,
    ),
}
"""Generated data sets by folder name (the ``folder`` a definition gives, relative to
``datasets_dir``)."""


def generated_by_repo(repo: str) -> GeneratedDataset | None:
    """The generated data set that definitions call ``repo``, if any."""
    return next((g for g in GENERATED.values() if g.repo == repo), None)


def generated_name(folder: str | None) -> str | None:
    """The registered name when a definition's ``folder`` is a generated data set, else None."""
    if folder and folder in GENERATED:
        return folder
    return None


def ensure_generated(name: str, settings: Settings) -> Path:
    """The folder of generated data set ``name``, written first when it is missing.

    Raises KeyError for an unregistered name and the generator's errors
    (``certbench.errors.DataSourceError``) when it cannot be written.
    """
    dataset = GENERATED[name]
    target = _target(name, settings)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=target.parent))
    try:
        dataset.write(scratch)
        os.chmod(scratch, 0o755)  # mkdtemp makes 0700; data sets are for every process to read
        try:
            scratch.rename(target)
        except OSError:
            if not target.exists():
                raise
            log.info("%s was written concurrently by another process; keeping that copy", name)
        else:
            log.info("wrote the generated data set %s (%s)", name, dataset.description)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)
    return target


def folders_of(test_sets: Iterable[Any], stages: dict[str, dict[str, Any]] | None) -> set[str]:
    """The ``folder`` values a benchmark's test sets (``dataset_folder``) and stage blocks name."""
    folders = {ts.dataset_folder for ts in test_sets if ts.dataset_folder}
    for row in (stages or {}).values():
        if isinstance(row, dict) and row.get("folder"):
            folders.add(str(row["folder"]))
    return folders


def ensure_for_folders(folders: Iterable[str | None], settings: Settings) -> list[str]:
    """Write every generated data set among the definition ``folders`` that is missing; returns
    the names written."""
    written = []
    for folder in folders:
        name = generated_name(folder)
        if name is not None and not _target(name, settings).exists():
            ensure_generated(name, settings)
            written.append(name)
    return written


def ensure_for_sources(sources: Iterable[str], settings: Settings) -> list[str]:
    """As :func:`ensure_for_folders` for resolved sources
    (``models.benchmarks.sources.resolve_source``: what
    a worker is about to read): each one that is the folder of a generated data set."""
    by_path = {_target(name, settings): name for name in GENERATED}
    wanted = {by_path[Path(s)] for s in sources if Path(s) in by_path}
    return ensure_for_folders(sorted(wanted), settings)


def _target(name: str, settings: Settings) -> Path:
    assert settings.datasets_dir is not None  # filled by Settings
    return settings.datasets_dir / name


class ReadsImages(Protocol):
    """What a run reads images from: its test sets and its stages' blocks (a
    ``models.stages.work.WorkItem``; this layer sits below the stages and names no work item)."""

    @property
    def test_sets(self) -> Sequence[TestSetSpec]: ...

    @property
    def stages(self) -> Mapping[str, Any]: ...


def ensure_for_work_item(item: ReadsImages, settings: Settings) -> list[str]:
    """Before a worker reads a submission's images: write the generated data sets its test sets
    and stage blocks read that this machine lacks (a fleet worker that never ran ``serve``)."""
    written = ensure_for_sources([spec.source for spec in item.test_sets], settings)
    stage_folders = [row.get("folder") for row in item.stages.values() if isinstance(row, dict)]
    return written + ensure_for_folders(stage_folders, settings)
