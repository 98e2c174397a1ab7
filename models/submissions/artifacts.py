"""Stored weights files, shared by content, and their reference counting.

Weights live once per content (``storage.weights_relpath(sha256)``) and every artifact with those
bytes (the same weights under another manifest) uses that one file. So a file may be deleted
only when no submission of *any* artifact with that hash may still need it: every state but
``rejected`` and ``duplicate`` (failed, cancelled and finished runs keep their weights for an
admin re-run).

Intake and release both lock the hash's ``weights_files`` row first (``lock``), then look at the
file and the rows, then commit: the count of remaining users, the deletion and the intake's new
rows can never interleave. The count is taken under the lock, never kept as a number that could
drift. On PostgreSQL the lock is a row lock (``SELECT ... FOR UPDATE``); on SQLite the insert
that creates the row takes the database's single write lock, which serialises the same way.

The file is deleted (or a staged upload moved into place) *before* the transaction commits,
while the lock is held: after a commit, another intake could take the lock and see the old state
of the file.

Partial files (``.*.tmp`` of ``storage.write_atomic``, staged uploads) that a killed process left
behind are removed by :func:`remove_stale_partials` at start-up and by the watchdog.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from sqlalchemy import func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from models.core.settings import Settings
from models.db.entities import Artifact, Submission, WeightsFile
from models.db.states import SubmissionState
from models.submissions import storage

log = logging.getLogger(__name__)

S = SubmissionState
#: States of a submission that no longer needs its weights.
RELEASED_STATES = frozenset({S.REJECTED, S.DUPLICATE})
#: Folder (under artifacts_dir) where uploads are streamed before they are checked and stored.
INCOMING_DIR = "incoming"
#: Partial files (``storage.write_atomic``'s temporaries, staged uploads) end in this suffix.
PARTIAL_SUFFIX = ".tmp"


def lock(session: Session, sha256: str, *, size_bytes: int = 0) -> WeightsFile:
    """The ``weights_files`` row of ``sha256``, created if absent, locked until the transaction
    ends (commit or rollback)."""
    insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    session.execute(
        insert(WeightsFile)
        .values(sha256=sha256, size_bytes=size_bytes, stored=False)
        .on_conflict_do_nothing(index_elements=["sha256"])
    )
    row = session.scalars(
        select(WeightsFile)
        .where(WeightsFile.sha256 == sha256)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one()
    return row


def users(session: Session, sha256: str) -> int:
    """Submissions, over every artifact with these weights, that may still need the file."""
    return int(
        session.scalar(
            select(func.count())
            .select_from(Submission)
            .join(Artifact, Artifact.id == Submission.artifact_id)
            .where(Artifact.sha256 == sha256, Submission.state.not_in(RELEASED_STATES))
        )
        or 0
    )


def store(
    session: Session,
    *,
    sha256: str,
    size_bytes: int,
    settings: Settings,
    data: bytes | None = None,
    staged: Path | None = None,
) -> tuple[str, Path | None]:
    """Make sure the weights with this hash are on disk, inside the caller's transaction.

    The bytes come from ``data`` or from ``staged`` (a file under the artifacts dir, moved into
    place, never copied). Returns (relative path, the path written by this call or None). Until
    the caller commits, the hash stays locked; a caller that rolls back must unlink the written
    path *before* rolling back (``discard``).
    """
    row = lock(session, sha256, size_bytes=size_bytes)
    relpath = storage.weights_relpath(sha256)
    path = storage.resolve(settings.artifacts_dir, relpath)
    if row.stored and path.is_file():
        return relpath, None
    if staged is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, path)
    elif data is not None:
        storage.write_atomic(path, data)
    else:
        raise ValueError("store() needs the weights: pass data= or staged=")
    row.stored, row.size_bytes = True, size_bytes
    return relpath, path


def discard(session: Session, written: Path | None) -> None:
    """Undo ``store`` on failure: remove the file it wrote (lock still held), then roll back."""
    try:
        if written is not None:
            written.unlink(missing_ok=True)
    finally:
        session.rollback()


def release_artifact(session: Session, artifact_id: int, *, settings: Settings) -> bool:
    """Delete the weights file of an artifact when no submission of any artifact sharing it may
    still need it; commits. Returns True when the file was deleted.

    Every artifact with those bytes loses its ``weights_path``; the rows stay (sha256, size,
    manifest) for the record.
    """
    artifact = session.get(Artifact, artifact_id)
    if artifact is None or artifact.weights_path is None:
        session.commit()
        return False
    sha256 = artifact.sha256
    row = lock(session, sha256, size_bytes=artifact.size_bytes)
    if users(session, sha256):
        session.commit()
        return False
    path = storage.resolve(settings.artifacts_dir, storage.weights_relpath(sha256))
    path.unlink(missing_ok=True)
    row.stored = False
    session.execute(
        update(Artifact)
        .where(Artifact.sha256 == sha256)
        .values(weights_path=None)
        .execution_options(synchronize_session="fetch")
    )
    session.commit()
    return True


def remove_stale_partials(settings: Settings, *, older_than: float) -> list[Path]:
    """Delete partial weights files (``*.tmp`` under ``weights/`` and ``incoming/``) untouched
    for ``older_than`` seconds: what an API or worker killed mid-write leaves behind. A live
    upload keeps touching its file, so a grace period longer than any pause in a transfer is
    safe. Returns the paths removed."""
    cutoff = time.time() - older_than
    removed = []
    for folder in ("weights", INCOMING_DIR):
        root = settings.artifacts_dir / folder
        if not root.is_dir():
            continue
        for path in root.rglob(f"*{PARTIAL_SUFFIX}"):
            try:
                if path.is_file() and path.stat().st_mtime < cutoff:
                    path.unlink()
                    removed.append(path)
            except FileNotFoundError:  # removed meanwhile by its writer or another sweep
                continue
            except OSError as err:  # e.g. permissions: report it, keep sweeping the others
                log.warning("cannot remove partial upload %s: %s", path, err)
    for path in removed:
        log.warning("removed a stale partial upload %s", path)
    return removed
