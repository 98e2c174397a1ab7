"""Reference entries shipped with the package, and the system account that submits them.

A packaged benchmark may come with reference models
(``models/catalog/demo_assets/<benchmark>/<entry>/``: ``model.safetensors`` + ``manifest.json``,
reproducible by ``scripts/train_demo_references``), so its leaderboard, plots and compare page have
something to show on a fresh installation. They go through the normal pipeline, as public baseline
entries of the account ``REFERENCE_USER`` (``api.services.reference_entries`` submits them when the
service starts).

"Already submitted" is decided per reference by its dedup key (weights, manifest, protocol
version) among that account's submissions on the benchmark, under the account's row lock
(``models.submissions.intake.lock_user``), so restarts and several API processes starting at once
make each reference exactly once; a new protocol version of the benchmark gets its references
again.

Their weights are published in the model zoo (``certbench download ID``) under the project's
licence, :data:`REFERENCE_LICENSE`: they were trained by ``scripts/train_demo_references`` and
ship in this repository under that licence. References submitted before they were published (an
older installation) are published on the next start.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable

from sqlalchemy import select
from sqlalchemy.orm import Session

from models.core.errors import ConflictError, NotFoundError
from models.db import accounts
from models.db.entities import Role, Submission, User

REFERENCE_USER = "certbench-references"
"""The system account owning the packaged reference entries (it has no token)."""
REFERENCE_LICENSE = "Apache-2.0"
"""SPDX licence of the packaged reference weights: the project's (``pyproject.toml``)."""
WEIGHTS_FILE = "model.safetensors"
MANIFEST_FILE = "manifest.json"


@dataclass(frozen=True)
class ReferenceEntry:
    """One packaged reference model for one benchmark."""

    benchmark: str
    key: str
    weights: bytes
    manifest: bytes


def packaged_references(root: Traversable | None = None) -> list[ReferenceEntry]:
    """Every reference under ``models/catalog/demo_assets`` (or ``root``), by benchmark and entry
    name."""
    root = root or files("models.catalog") / "demo_assets"
    if not root.is_dir():
        return []
    found = []
    for benchmark in sorted(root.iterdir(), key=lambda e: e.name):
        if not benchmark.is_dir():
            continue
        for entry in sorted(benchmark.iterdir(), key=lambda e: e.name):
            weights, manifest = entry / WEIGHTS_FILE, entry / MANIFEST_FILE
            if entry.is_dir() and weights.is_file() and manifest.is_file():
                found.append(
                    ReferenceEntry(
                        benchmark=benchmark.name,
                        key=entry.name,
                        weights=weights.read_bytes(),
                        manifest=manifest.read_bytes(),
                    )
                )
    return found


def reference_user(session: Session) -> User:
    """The reference account, created on first use (a concurrent creator's row is reused)."""
    try:
        return accounts.get_user(session, name=REFERENCE_USER)
    except NotFoundError:
        pass
    try:
        return accounts.create_user(session, name=REFERENCE_USER, role=Role.SUBMITTER)
    except ConflictError:
        return accounts.get_user(session, name=REFERENCE_USER)


def submitted(session: Session, user: User, benchmark_id: int, dedup_key: str) -> bool:
    """Whether ``user`` already submitted this job (any state) on the benchmark."""
    return bool(_submissions(session, user, benchmark_id, dedup_key))


def publish_submitted(session: Session, user: User, benchmark_id: int, dedup_key: str) -> int:
    """Publish under REFERENCE_LICENSE the weights of the reference's earlier submissions that
    are not published yet (an installation older than the zoo's references). Returns how many
    changed; the caller commits. A withdrawn reference (an admin's takedown keeps the licence)
    stays withdrawn."""
    changed = 0
    for submission in _submissions(session, user, benchmark_id, dedup_key):
        if submission.weights_license is None:
            submission.weights_public = True
            submission.weights_license = REFERENCE_LICENSE
            changed += 1
    return changed


def _submissions(
    session: Session, user: User, benchmark_id: int, dedup_key: str
) -> list[Submission]:
    return list(
        session.scalars(
            select(Submission).where(
                Submission.user_id == user.id,
                Submission.benchmark_id == benchmark_id,
                Submission.dedup_key == dedup_key,
            )
        )
    )
