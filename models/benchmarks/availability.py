"""Is a benchmark's data on this machine? Decided in milliseconds, without the network.

A worker reads each set of images from a local folder, a local copy of a Hub repo
(``<datasets_dir>/<org>/<name>``, see ``models.benchmarks.sources.locate_source``) or the Hub
through ``datasets`` — which, without network, falls back to the copy it cached when the data was
last loaded (``<HF_DATASETS_CACHE>/<org>___<name>/<config>/...``). A source is available here when
one of those is present and, where the definition pins a ``sha256``, the local copy or folder the
worker would read holds those bytes (else the run would fail with ``dataset_mismatch``); the data
sets the service generates itself (``models.benchmarks.generated``) always are. Everything else
would fail on the worker after the upload, so the API shows such a benchmark as "data not
available here" and refuses submissions to it at intake, with the one command that fixes it
(``certbench datasets fetch REPO``, with ``--folder`` for a definition's missing ``folder``,
``--force`` to replace a copy that differs from the pin). Content hashes are computed once per
version of the files (``models.benchmarks.content_hashes``). Where the check is off
(``CERTBENCH_REQUIRE_LOCAL_DATA=false``) and a worker finds the data missing,
:func:`worker_advice` words the run's failure for the operator likewise.

The answer is cached per benchmark version for ``CACHE_SECONDS``: intake and every page ask, and a
copy that appears (a fetch finishing) shows within that time. Messages name Hub ids and the
definition's folder names, never the machine's paths.
"""

from __future__ import annotations

import os
import re
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from certbench.data import alias_of
from certbench.errors import DataSourceError
from models.benchmarks.content_hashes import config_content_sha256
from models.benchmarks.data_pins import pinned_revision
from models.benchmarks.folders import folder_problem, locate_folder
from models.benchmarks.generated import generated_by_repo, generated_name
from models.benchmarks.sources import hub_mirror
from models.core.settings import Settings
from models.db.entities import Benchmark

CACHE_SECONDS = 10.0


@dataclass(frozen=True)
class Source:
    """One place a benchmark reads images from, as its definition names it (with its pins)."""

    repo: str
    folder: str | None
    config: str | None
    revision: str | None
    split: str = "test"
    sha256: str | None = None


@dataclass(frozen=True)
class Mismatch:
    """Data here that is not the pinned bytes: ``name`` is the Hub id of a local copy (``repo``
    set: the fix is fetching it again) or a definition folder's name (``repo`` None)."""

    name: str
    problem: str
    repo: str | None = None


INVALID_FOLDER = "(a folder the definition may not name)"
"""How pages name a stored ``folder`` that fails the folder checks: its value is never shown."""


@dataclass(frozen=True)
class MissingFolder:
    """A definition's ``folder`` that is not on this machine, named as a public page may name it:
    a relative folder as written (it lies under ``CERTBENCH_DATASETS_DIR``), an absolute one by
    its last part only (its path is this deployment's business)."""

    name: str
    repo: str
    relative: bool

    @classmethod
    def of(cls, folder: str, repo: str) -> MissingFolder:
        """Named as a page may name it: never a value that failed the folder checks
        (``models.benchmarks.folders``), which a row stored before them may hold."""
        if folder_problem(folder) is not None:
            return cls(INVALID_FOLDER, repo, relative=False)
        path = Path(folder)
        if path.is_absolute():
            return cls(path.name or folder, repo, relative=False)
        return cls(folder, repo, relative=True)

    @property
    def command(self) -> str | None:
        """The command that writes the data into the folder: it resolves the folder under the
        datasets dir as the service does. None for an absolute folder (not shown)."""
        if not self.relative:
            return None
        generated = generated_by_repo(self.repo)
        if generated is not None:
            return generated.command.format(folder=shlex.quote(self.name))
        return f"certbench datasets fetch {alias_of(self.repo)} --folder {shlex.quote(self.name)}"

    @property
    def fix(self) -> str:
        """What is missing and how to fill it, in one clause."""
        if self.relative:
            where = f"folder {self.name!r} ({self.repo}) is missing under CERTBENCH_DATASETS_DIR"
            run = f"run `{self.command}`"
        else:
            where = f"folder …/{self.name} ({self.repo}) is missing"
            run = ""
        if generated_by_repo(self.repo) is not None:
            how = (
                run or "write it at the definition's `folder` with `certbench datasets demo --out`"
            )
            return f"{where}: {how} (no network needed)"
        copy = (
            "copy the data to the definition's `folder` (Hub layout or torchvision CIFAR, e.g. "
            f"`hf download {self.repo} --repo-type dataset --local-dir DIR` where there is "
            "network, then DIR moved there)"
        )
        return f"{where}: {run}, or {copy}" if run else f"{where}: {copy}"


@dataclass(frozen=True)
class DataAvailability:
    """Whether every source of a benchmark is here; if not, what is missing and the fix."""

    available: bool
    missing_repos: tuple[str, ...] = ()
    folders: tuple[MissingFolder, ...] = ()
    mismatched: tuple[Mismatch, ...] = ()
    refused: tuple[str, ...] = ()
    """Folders never read here, each with why (out of CERTBENCH_DATASETS_DIR; invalid)."""

    @property
    def missing_folders(self) -> tuple[str, ...]:
        """The missing folders' public names."""
        return tuple(folder.name for folder in self.folders)

    @property
    def command(self) -> str | None:
        """The shell line that fetches or writes the missing data and replaces local copies that
        differ from their pin (None when nothing is missing, or the only missing folders are
        absolute ones, whose paths are not shown)."""
        commands = []
        if self.missing_repos:
            names = " ".join(alias_of(repo) for repo in self.missing_repos)
            commands.append(f"certbench datasets fetch {names}")
        stale = [m.repo for m in self.mismatched if m.repo is not None]
        if stale:
            names = " ".join(alias_of(repo) for repo in dict.fromkeys(stale))
            commands.append(f"certbench datasets fetch {names} --force")
        commands += [f.command for f in self.folders if f.command is not None]
        return " && ".join(commands) or None

    @property
    def hint(self) -> str | None:
        """What is missing and how to fix it (None when everything is here)."""
        if self.available:
            return None
        parts = []
        if self.missing_repos:
            fetch = f"certbench datasets fetch {' '.join(map(alias_of, self.missing_repos))}"
            parts.append(
                f"{', '.join(self.missing_repos)} not on this machine: run `{fetch}` "
                "where the service runs, or point the definition's `folder` at a local copy"
            )
        parts += [folder.fix for folder in self.folders]
        for mismatch in self.mismatched:
            fix = (
                f"run `certbench datasets fetch {alias_of(mismatch.repo)} --force` where the "
                "service runs"
                if mismatch.repo is not None
                else "restore the published files, or pin these bytes in a new definition "
                "version (`certbench benchmarks pin DEFINITION --data FOLDER`)"
            )
            parts.append(f"{mismatch.name}: {mismatch.problem}; {fix}")
        parts += [
            f"{reason}; load a definition version whose `folder` stays in CERTBENCH_DATASETS_DIR"
            for reason in self.refused
        ]
        return "; ".join(parts)


def worker_advice(problem: str, *, repo: str, folder: str | None) -> str:
    """The failure message of a run whose data a worker could not find (the check at intake is
    off): what failed and the operator's fix. ``problem`` is ``certbench.data.sources``'s account
    of a Hub failure without its command-line advice; for a missing ``folder`` it names a path of
    this machine, so it is left out and the folder is named as the pages name it."""
    rerun = "then re-run the submission"
    if folder:
        missing = MissingFolder.of(folder, repo)
        return f"the data is not on this worker: {missing.fix}; {rerun}"
    return (
        f"{problem}. The workers read {repo} from a local copy when they have one: run "
        f"`certbench datasets fetch {alias_of(repo)}` on every worker machine (or give them a "
        "shared CERTBENCH_DATASETS_DIR), or point the benchmark definition's `folder` at a local "
        f"copy; {rerun}"
    )


_cache: dict[tuple[int, str, str], tuple[float, DataAvailability]] = {}
_lock = threading.Lock()


def benchmark_availability(benchmark: Benchmark, settings: Settings) -> DataAvailability:
    """Whether ``benchmark``'s data is on this machine (cached for ``CACHE_SECONDS``)."""
    return availability_by_id(
        benchmark.id, benchmark.definition_sha256, settings, lambda: sources_of(benchmark)
    )


def availability_by_id(
    benchmark_id: int,
    definition_sha256: str,
    settings: Settings,
    sources: Callable[[], list[Source]],
) -> DataAvailability:
    """As :func:`benchmark_availability` for a benchmark known by id and definition hash;
    ``sources`` (which may load the test sets) is called only when the cache has no answer."""
    key = (benchmark_id, definition_sha256, str(settings.datasets_dir))
    now = time.monotonic()
    with _lock:
        hit = _cache.get(key)
        if hit is not None and now - hit[0] < CACHE_SECONDS:
            return hit[1]
    result = check_sources(sources(), settings)
    with _lock:
        _cache[key] = (now, result)
    return result


def clear_cache() -> None:
    """Forget cached answers (tests, and a fetch in the same process)."""
    with _lock:
        _cache.clear()


def sources_of(benchmark: Benchmark) -> list[Source]:
    """Every image source a benchmark's test sets and stage blocks name, without repeats."""
    found: dict[Source, None] = {}
    for ts in benchmark.test_sets:
        pin = ts.provenance or {}
        revision = pinned_revision(ts.revision, pin, name=ts.name)
        source = Source(
            ts.dataset_repo, ts.dataset_folder, ts.config, revision, ts.split, pin.get("sha256")
        )
        found[source] = None
    for name, row in (benchmark.stages or {}).items():
        if isinstance(row, dict) and row.get("repo"):
            found[_stage_source(name, row)] = None
    return list(found)


def _stage_source(name: str, row: dict[str, Any]) -> Source:
    pin = row.get("provenance") or {}
    return Source(
        str(row["repo"]),
        row.get("folder"),
        row.get("config"),
        pinned_revision(row.get("revision"), pin, name=name),
        row.get("split", "test"),
        pin.get("sha256"),
    )


def check_sources(sources: list[Source], settings: Settings) -> DataAvailability:
    """Check each source once (folders: a ``stat``; Hub repos: the local copy, then the
    ``datasets`` cache; pinned local data: its content hash, once per file version)."""
    repos: list[str] = []
    folders: list[MissingFolder] = []
    mismatched: dict[Mismatch, None] = {}
    refused: dict[str, None] = {}
    for source in sources:
        if source.folder:
            if generated_name(source.folder) is not None:
                continue
            assert settings.datasets_dir is not None  # filled by Settings
            located = locate_folder(source.folder, settings.datasets_dir)
            if located.path is None or located.refused is not None:
                refused[located.refused or INVALID_FOLDER] = None
                continue
            path = located.path
            if not path.is_dir():
                missing = MissingFolder.of(source.folder, source.repo)
                if missing not in folders:
                    folders.append(missing)
            elif (problem := pin_problem(path, source)) is not None:
                mismatched[Mismatch(Path(source.folder).name or source.folder, problem)] = None
            continue
        mirror = hub_mirror(source.repo, settings)
        if mirror is not None and mirror.is_dir() and (source.revision is None or source.sha256):
            if (problem := pin_problem(mirror, source)) is not None:
                mismatched[Mismatch(source.repo, problem, repo=source.repo)] = None
        elif not datasets_cache_has(source.repo, source.config) and source.repo not in repos:
            repos.append(source.repo)
    return DataAvailability(
        available=not repos and not folders and not mismatched and not refused,
        missing_repos=tuple(repos),
        folders=tuple(folders),
        mismatched=tuple(mismatched),
        refused=tuple(refused),
    )


def pin_problem(path: Path, source: Source) -> str | None:
    """Why the local data at ``path`` is not what ``source`` pins (None: no sha256 pin, or the
    bytes are the pinned ones). Worded without the machine's paths."""
    if source.sha256 is None:
        return None
    try:
        found = config_content_sha256(path, source.config, source.split)
    except DataSourceError as err:
        return (
            f"data here cannot be checked against the pinned sha256 {source.sha256} "
            f"({_without_path(str(err), path)})"
        )
    if found == source.sha256:
        return None
    return f"data here differs from the pinned bytes: sha256 {found}, pinned {source.sha256}"


def _without_path(text: str, path: Path) -> str:
    return text.replace(str(path), "the local copy")


def datasets_cache_has(repo: str, config: str | None) -> bool:
    """Whether ``datasets`` holds a prepared copy of ``repo`` (``config``: that config) in its
    cache, i.e. whether its offline fallback (``CachedDatasetModuleFactory``) would find one.

    Mirrors that factory's lookup: ``<HF_DATASETS_CACHE>/<org>___<snake_case name>/<config>/
    <version>/<hash>/`` must be a folder. Computed here rather than read from ``datasets.config``:
    importing ``datasets`` takes seconds, too long for the first page an API process serves (a
    test keeps both in agreement).
    """
    parts = repo.split("/")
    if len(parts) > 2 or not all(parts):
        return False
    parts[-1] = _snake_case(parts[-1])
    root = datasets_cache_dir() / "___".join(parts)
    if not root.is_dir():
        return False
    pattern = f"{config}/*/*" if config else "*/*/*"
    return any(path.is_dir() for path in root.glob(pattern))


def datasets_cache_dir() -> Path:
    """``datasets.config.HF_DATASETS_CACHE`` as ``datasets`` derives it from the environment."""
    explicit = os.environ.get("HF_DATASETS_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "~/.cache")
    home = os.environ.get("HF_HOME", os.path.join(xdg, "huggingface"))
    return Path(os.path.expanduser(home)) / "datasets"


def _snake_case(name: str) -> str:
    """``datasets.naming.camelcase_to_snakecase``."""
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z\d])([A-Z])", r"\1_\2", name).lower()
