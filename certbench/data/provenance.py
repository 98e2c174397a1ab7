"""Provenance that can be published: sources named by Hub id or content hash, never by path.

Dataset cards, ``checksum.json`` files and records metadata leave the machine (the Hub, the
leaderboard), so they must not carry local absolute paths (``/tmp/...``, ``/home/alice/...``):
those leak user names and pin nothing. A source is recorded as its Hub id + revision, or, for a
local folder, as its kind plus the SHA-256 of its content (the generators' ``source_sha256``).

:func:`config_sha256` is the content hash that pins a test set: the SHA-256 of its parquet shard
(for the usual single shard, the same value as the shard's ``checksum.json`` entry and its Hub
LFS object id), or, for several shards, the SHA-256 of the lines ``<sha256>  <path in the folder>``
(sorted as the card lists them, like ``sha256sum`` output).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from certbench.data.sources import config_files, source_kind

LOCAL_PATH = re.compile(
    r"(?<![\w:/.~)\]-])/[A-Za-z_][\w.+~-]*(?:/[\w.+~-]+)+"  # /tmp/x, /home/alice/data
    r"|(?<![\w/])~/[\w.+~-]+"  # ~/data
    r"|\b[A-Za-z]:\\[^\s`'\"]+"  # C:\Users\...
)
"""Absolute or home-relative local paths in free text; URLs (``https://a/b``) do not match."""

LOCAL_KINDS = {"torchvision": "local torchvision CIFAR folder", "folder": "local Hub-layout folder"}


def find_local_paths(text: str) -> list[str]:
    """Local filesystem paths found in `text` (empty when the text is safe to publish)."""
    return LOCAL_PATH.findall(text)


def public_name(name: str) -> str:
    """A dataset name fit to publish: Hub ids and aliases unchanged, local paths replaced.

    A name is local when it contains an absolute or home path, starts with ``.``/``/``/``~``,
    or names an existing folder on this machine.
    """
    text = str(name)
    if find_local_paths(text) or text.startswith((".", "/", "~")) or Path(text).exists():
        return "a local folder"
    return text


def public_source(source: str | Path, revision: str | None = None) -> dict[str, str]:
    """How to name a dataset source in published metadata.

    A Hub source keeps its repo id and revision ("unpinned" when none was given); a local
    folder is named by its kind only: callers add its content hash (``source_sha256``).

    Raises:
        certbench.errors.DataSourceError: the source does not exist or is not a dataset.
    """
    kind, hub_id = source_kind(source)
    if kind == "hub":
        return {"source": hub_id, "source_revision": revision or "unpinned"}
    return {"source": LOCAL_KINDS[kind]}


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def config_sha256(folder: str | Path, config: str | None = None, split: str = "test") -> str:
    """Content hash of one config's split in a local Hub-layout folder (see module docstring).

    Raises:
        certbench.errors.DataSourceError: not a Hub-layout folder, unknown config, no files.
    """
    files = config_files(folder, config, split)
    if len(files) == 1:
        return sha256_file(files[0])
    root = Path(folder).resolve()
    lines = "".join(
        f"{sha256_file(f)}  {f.resolve().relative_to(root).as_posix()}\n" for f in files
    )
    return hashlib.sha256(lines.encode()).hexdigest()
