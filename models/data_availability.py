"""Is a benchmark's data on this machine? Decided in milliseconds, without the network.

A worker reads each set of images from a local folder, a local copy of a Hub repo
(``<datasets_dir>/<org>/<name>``, see ``models.work.resolve_source``) or the Hub through
``datasets`` — which, without network, falls back to the copy it cached when the data was last
loaded (``<HF_DATASETS_CACHE>/<org>___<name>/<config>/...``). A source is available here when one
of those is present; the data sets the service generates itself (``models.generated_datasets``)
always are. Everything else would fail on the worker after the upload, so the API shows such a
benchmark as "data not available here" and refuses submissions to it at intake, with the one
command that fixes it (``certbench datasets fetch REPO``).

The answer is cached per benchmark version for ``CACHE_SECONDS``: intake and every page ask, and a
copy that appears (a fetch finishing) shows within that time. Messages name Hub ids and the
definition's folder names, never the machine's paths.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from certbench.dataset_names import HUB_ALIASES
from models.data_pins import pinned_revision
from models.entities import Benchmark
from models.generated_datasets import generated_name
from models.settings import Settings
from models.work import hub_mirror

CACHE_SECONDS = 10.0
_ALIAS_OF = {repo: alias for alias, repo in HUB_ALIASES.items()}


@dataclass(frozen=True)
class Source:
    """One place a benchmark reads images from, as its definition names it."""

    repo: str
    folder: str | None
    config: str | None
    revision: str | None


@dataclass(frozen=True)
class DataAvailability:
    """Whether every source of a benchmark is here; if not, what is missing and the fix."""

    available: bool
    missing_repos: tuple[str, ...] = ()
    missing_folders: tuple[str, ...] = ()

    @property
    def command(self) -> str | None:
        """The one command that fetches the missing Hub data (None when none is missing)."""
        if not self.missing_repos:
            return None
        names = " ".join(_ALIAS_OF.get(repo, repo) for repo in self.missing_repos)
        return f"certbench datasets fetch {names}"

    @property
    def hint(self) -> str | None:
        """What is missing and how to fix it (None when everything is here)."""
        if self.available:
            return None
        parts = []
        if self.missing_repos:
            parts.append(
                f"{', '.join(self.missing_repos)} not on this machine: run `{self.command}` "
                "where the service runs, or point the definition's `folder` at a local copy"
            )
        if self.missing_folders:
            parts.append(
                f"local folder(s) {', '.join(self.missing_folders)} missing under "
                "CERTBENCH_DATASETS_DIR: copy the data there (Hub layout or torchvision CIFAR) "
                "or load a definition whose `folder` points at it"
            )
        return "; ".join(parts)


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
        revision = pinned_revision(ts.revision, ts.provenance or {}, name=ts.name)
        found[Source(ts.dataset_repo, ts.dataset_folder, ts.config, revision)] = None
    for row in (benchmark.stages or {}).values():
        if isinstance(row, dict) and row.get("repo"):
            found[_stage_source(row)] = None
    return list(found)


def _stage_source(row: dict[str, Any]) -> Source:
    return Source(str(row["repo"]), row.get("folder"), row.get("config"), row.get("revision"))


def check_sources(sources: list[Source], settings: Settings) -> DataAvailability:
    """Check each source once (folders: a ``stat``; Hub repos: the local copy, then the
    ``datasets`` cache)."""
    repos: list[str] = []
    folders: list[str] = []
    for source in sources:
        if source.folder:
            if generated_name(source.folder) is None and not _folder_here(source.folder, settings):
                name = Path(source.folder).name or source.folder
                if name not in folders:
                    folders.append(name)
        elif not _hub_here(source, settings) and source.repo not in repos:
            repos.append(source.repo)
    return DataAvailability(
        available=not repos and not folders,
        missing_repos=tuple(repos),
        missing_folders=tuple(folders),
    )


def _folder_here(folder: str, settings: Settings) -> bool:
    path = Path(folder)
    if not path.is_absolute():
        assert settings.datasets_dir is not None  # filled by Settings
        path = settings.datasets_dir / path
    return path.is_dir()


def _hub_here(source: Source, settings: Settings) -> bool:
    if source.revision is None:
        mirror = hub_mirror(source.repo, settings)
        if mirror is not None and mirror.is_dir():
            return True
    return datasets_cache_has(source.repo, source.config)


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
