"""Commit-reveal of the noise seed of each evaluation run.

Randomized smoothing's guarantee assumes the noise is independent of the classifier. With a
public seed the noise is known before the upload, and a submitter could fit a model to it. So
every run (a submission on its benchmark, and every rerun) draws a fresh secret seed with
``secrets`` (``SEED_BITS`` bits) when it is queued; the service stores it in ``run_seeds`` but
shows only its commitment, the SHA-256 of the seed as written (``0x`` + 32 hex digits), until the
run has ended (finished, failed, cancelled or rejected). Then the seed is revealed: anyone can
check ``sha256(seed) == commitment`` and reproduce the records with
``certbench certify ... --seed <seed>``.

A rerun that resumes recorded shards keeps the seed those shards were computed with: one run's
records must follow from one seed, and the weights were fixed (content-addressed) before that
seed was drawn, so knowing it since the previous attempt ended cannot have shaped the model.
Any other rerun draws a new seed.

Submissions from before commit-reveal ran with their benchmark's public seed; they keep a
``public`` row (migration 0007) and are shown as such.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models.db.base import utcnow
from models.db.entities import RunSeed, StageShard, Submission
from models.db.states import SubmissionState

S = SubmissionState
SEED_BITS = 128
#: States in which a run has ended, so its seed is revealed. ``duplicate`` never runs.
REVEAL_STATES = frozenset({S.FINISHED, S.FAILED, S.CANCELLED, S.REJECTED})


class SeedKind(StrEnum):
    SECRET = "secret"
    PUBLIC = "public"


def seed_text(seed: int) -> str:
    """The written form of a secret seed: ``0x`` and 32 lowercase hex digits (what is hashed)."""
    return f"0x{seed:0{SEED_BITS // 4}x}"


def commitment(text: str) -> str:
    """SHA-256 (hex) of the seed as written: ``printf %s 0x… | sha256sum``."""
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def parse(text: str) -> int:
    """A stored seed (``0x…`` hex or decimal) as an integer."""
    return int(text, 16) if text.lower().startswith("0x") else int(text)


def is_revealed(state: SubmissionState) -> bool:
    """Whether a run in ``state`` has ended, so that its seed may be shown."""
    return state in REVEAL_STATES


def draw(session: Session, submission_id: int) -> RunSeed:
    """Give the submission a fresh secret seed (replacing any earlier one); the caller commits."""
    text = seed_text(secrets.randbits(SEED_BITS))
    row = session.get(RunSeed, submission_id)
    if row is None:
        row = RunSeed(submission_id=submission_id)
        session.add(row)
    row.kind = SeedKind.SECRET.value
    row.seed = text
    row.commitment = commitment(text)
    row.drawn_at = utcnow()
    return row


def redraw_for_rerun(session: Session, submission_id: int) -> bool:
    """At a rerun: a fresh seed unless recorded shards are resumed (they keep theirs).

    Returns True when a new seed was drawn. The caller commits.
    """
    kept = session.scalar(
        select(func.count())
        .select_from(StageShard)
        .where(StageShard.submission_id == submission_id)
    )
    if kept and session.get(RunSeed, submission_id) is not None:
        return False
    draw(session, submission_id)
    return True


def run_seed(session: Session, submission: Submission) -> tuple[int, RunSeed | None]:
    """The seed a worker evaluates ``submission`` with, and its row (None: the benchmark's
    public seed, for a submission that predates commit-reveal and has no row)."""
    row = session.get(RunSeed, submission.id)
    if row is None:
        return submission.benchmark.seed, None
    return parse(row.seed), row


@dataclass(frozen=True)
class SeedView:
    """What may be shown of a run's seed: ``value`` only once the run has ended."""

    kind: str
    commitment: str
    revealed: bool
    value: str | None
    drawn_at: datetime | None


def view(session: Session, submission: Submission) -> SeedView | None:
    """The public view of a submission's run seed (None for a duplicate, which never runs)."""
    if submission.state == S.DUPLICATE:
        return None
    row = session.get(RunSeed, submission.id)
    if row is None:
        text = str(submission.benchmark.seed)
        return SeedView(SeedKind.PUBLIC.value, commitment(text), True, text, None)
    public = row.kind == SeedKind.PUBLIC.value
    revealed = public or is_revealed(submission.state)
    return SeedView(
        kind=row.kind,
        commitment=row.commitment,
        revealed=revealed,
        value=row.seed if revealed else None,
        drawn_at=row.drawn_at,
    )
