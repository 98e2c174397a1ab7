"""Where artifacts live on disk, relative to ``Settings.artifacts_dir``.

    weights/<sha[:2]>/<sha256>.safetensors              uploaded weights, content-addressed
    records/<submission>/<test set>/shard-<index>.parquet  per-shard per-image records
    records/<submission>/<test set>.parquet              merged records of one test set
    records/<submission>/_robustness/shard-<index>.parquet  per-shard robustness records
    records/<submission>/_robustness.parquet             merged robustness records

(``_robustness`` cannot clash with a test set: test-set names start with a letter or digit.)

Paths stored in the database are relative (POSIX) so the data dir can move between machines and
containers. Every write goes to a temporary file in the same folder, then ``os.replace``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path, PurePosixPath

from models.core.errors import StorageError


def weights_relpath(sha256: str) -> str:
    """Relative path of the weights with this SHA-256."""
    _check_hex(sha256)
    return str(PurePosixPath("weights", sha256[:2], f"{sha256}.safetensors"))


def shard_records_relpath(submission_id: int, test_set: str, shard_index: int) -> str:
    """Relative path of one shard's per-image records (parquet)."""
    return str(
        PurePosixPath("records", str(submission_id), test_set, f"shard-{shard_index:05d}.parquet")
    )


def test_set_records_relpath(submission_id: int, test_set: str) -> str:
    """Relative path of the merged per-image records of one test set (parquet)."""
    return str(PurePosixPath("records", str(submission_id), f"{test_set}.parquet"))


ROBUSTNESS = "_robustness"


def robustness_shard_relpath(submission_id: int, shard_index: int) -> str:
    """Relative path of one robustness shard's per-image records (parquet)."""
    return shard_records_relpath(submission_id, ROBUSTNESS, shard_index)


def robustness_records_relpath(submission_id: int) -> str:
    """Relative path of a submission's merged robustness records (parquet)."""
    return test_set_records_relpath(submission_id, ROBUSTNESS)


def submission_records_dir(submission_id: int) -> str:
    """Relative folder holding every records file of a submission."""
    return str(PurePosixPath("records", str(submission_id)))


def resolve(artifacts_dir: Path, relpath: str) -> Path:
    """Absolute path of a stored relative path, refusing anything that escapes artifacts_dir."""
    root = artifacts_dir.resolve()
    path = (root / relpath).resolve()
    if not path.is_relative_to(root):
        raise StorageError(f"stored path {relpath!r} escapes the artifacts dir {root}")
    return path


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` via a temporary file + rename, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _check_hex(sha256: str) -> None:
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise StorageError(f"sha256 {sha256!r} is not 64 lowercase hex digits")
