"""Content hashes of local test-set copies, computed once per version of their files.

Checking a ``sha256`` pin (``models.benchmarks.data_pins``) means hashing the config's parquet
shard(s): tens of megabytes for a clean CIFAR test split. Workers check before every shard and the
API asks whether a benchmark's data is here on every page, so the hash is remembered per version of
the files, a version being each file's (path, size, modification time): a ``stat`` per request,
a new hash only after a file was rewritten. Light at import time (the hashing modules, which
pull in torch, load on first use).
"""

from __future__ import annotations

import threading
from pathlib import Path

Versions = tuple[tuple[str, int, int], ...]

_cache: dict[tuple[str, str | None, str], tuple[Versions, str]] = {}
_lock = threading.Lock()


def config_content_sha256(folder: str | Path, config: str | None, split: str) -> str:
    """``certbench.data.provenance.config_sha256`` of one config's split, cached per file version.

    Raises:
        certbench.errors.DataSourceError: not a Hub-layout folder, unknown config or split.
    """
    from certbench.data import config_files, config_sha256

    files = config_files(folder, config, split)
    versions = tuple(_version(path) for path in files)
    key = (str(folder), config, split)
    with _lock:
        hit = _cache.get(key)
    if hit is not None and hit[0] == versions:
        return hit[1]
    digest = config_sha256(folder, config, split)
    with _lock:
        _cache[key] = (versions, digest)
    return digest


def clear_cache() -> None:
    """Forget every remembered hash (tests)."""
    with _lock:
        _cache.clear()


def _version(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return str(path), stat.st_size, stat.st_mtime_ns
