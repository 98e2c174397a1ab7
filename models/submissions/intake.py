"""Submission intake: an upload from its first check to the queue, in one pass.

:func:`submit` is the whole of it, and the API's only call into this package for an upload: the
refused-uploads limit (``models.submissions.refusals``) and the quotas' early refusal
(``models.submissions.quotas.decide``) before the body is read; then the API's part, handed in as
``prepare`` (stream the body, the cheap checks: size caps, safetensors header, manifest schema;
the estimate); then ``create_submission``, where an upload becomes rows + one weights file, all or
nothing (the file is put in place inside the transaction and removed again if it fails) and the
quota is decided, authoritatively, in that transaction; then the queue. Every refusal of the
upload itself (IntakeError) is counted against the refused-uploads limit.

Quotas and dedup hold under concurrency because the database enforces them: an intake first
locks its user's row (so one user's uploads are counted one at a time) and the weights' row
(``models.submissions.artifacts.lock``: identical uploads of several users are serialised, the later
ones see the first and become duplicates), and a partial unique index allows one live original per
dedup key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from certbench.data import UnknownLicenseError, canonical_license
from models.core.errors import IntakeError
from models.core.settings import Settings
from models.db.base import utcnow
from models.db.entities import Artifact, Benchmark, Submission, SubmissionEvent, User
from models.db.states import DEDUP_STATES, Reason, SubmissionState
from models.submissions import artifacts, compute_quota, lifecycle, quotas, refusals, run_seeds

S = SubmissionState


#: Attempts of an intake that lost a dedup race to a concurrent identical one (the next attempt
#: finds that one and records a duplicate).
INTAKE_ATTEMPTS = 3


@dataclass(frozen=True)
class StagedWeights:
    """Weights already streamed to a file under the artifacts dir, hashed on the way."""

    path: Path
    sha256: str
    size: int

    def discard(self) -> None:
        """Remove the staged file (a no-op once ``create_submission`` moved it into the store)."""
        self.path.unlink(missing_ok=True)


@dataclass(frozen=True)
class Upload:
    """An upload that passed the cheap checks: the weights (bytes, or a staged file that
    ``create_submission`` moves into place), the parsed manifest and its facts."""

    weights: bytes
    manifest: dict[str, Any]
    model_name: str
    architecture: str
    sigma: float
    is_private: bool = False
    extra_data: bool = False
    venue: str | None = None
    staged: StagedWeights | None = None
    weights_public: bool = False
    weights_license: str | None = None
    is_baseline: bool = False
    """A reference entry the service submits itself (``api.services.reference_entries``)."""
    flops_per_sample: int | None = None
    """The network's FLOPs per noise sample as intake counted them (``check_cost``)."""

    @property
    def weights_sha256(self) -> str:
        if self.staged is not None:
            return self.staged.sha256
        return hashlib.sha256(self.weights).hexdigest()

    @property
    def weights_size(self) -> int:
        return self.staged.size if self.staged is not None else len(self.weights)

    @property
    def manifest_sha256(self) -> str:
        return manifest_sha256(self.manifest)

    def submission_columns(self) -> dict[str, Any]:
        """What the submitter says about the model: the same on a new run and on a duplicate
        of an existing one (each submitter's own name, privacy, venue and licence)."""
        return {
            "is_private": self.is_private,
            "model_name": self.model_name,
            "architecture": self.architecture,
            "sigma": self.sigma,
            "extra_data": self.extra_data,
            "venue": self.venue,
            "weights_public": self.weights_public,
            "weights_license": self.weights_license,
        }


@dataclass(frozen=True)
class Prepared:
    """An upload the API has read and checked (``api.services.intake``): the benchmark it is
    for, the upload, and its estimated work (``models.runs.estimates``; None: not estimated)."""

    benchmark: Benchmark
    upload: Upload
    forward_passes: int | None


def submit(
    session: Session,
    user: User,
    *,
    settings: Settings,
    prepare: Callable[[], Prepared],
    enqueue: Callable[[int], object],
) -> Submission:
    """Take one upload of ``user`` from its first check to the queue; the new submission, or a
    ``duplicate`` row pointing at an identical earlier one.

    ``prepare`` is the API's part, called once the user may upload at all: read the body, run
    the cheap checks, estimate the work. ``enqueue`` queues validation of a submission id. The
    staged weights file is gone when this returns or raises (moved into the store, or removed).
    Raises QuotaExceededError (429, also for too many refused uploads), IntakeError (nothing
    stored; counted against the refused-uploads limit) and ServiceUnavailableError when the
    queue is down (the submission is then failed, ``lifecycle.queue_or_fail``).
    """
    refusals.check(session, user, settings=settings)
    quotas.decide(session, user, settings=settings, before_upload=True)
    try:
        prepared = prepare()
        try:
            submission = create_submission(
                session, user=user, benchmark=prepared.benchmark,
                upload=with_publication_checked(prepared.upload), settings=settings,
                forward_passes=prepared.forward_passes,
            )  # fmt: skip
        finally:
            if prepared.upload.staged is not None:
                prepared.upload.staged.discard()
    except IntakeError as err:  # refused before anything was stored: counted, then raised
        refusals.record(session, user, err.code, settings=settings)
        raise
    if submission.state == S.SUBMITTED:
        lifecycle.queue_or_fail(session, submission.id, enqueue)
    return submission


def check_license(license: str | None) -> str | None:
    """The canonical SPDX spelling of ``license`` (None stays None). Raises IntakeError
    (invalid_license) naming the accepted identifiers."""
    if license is None:
        return None
    try:
        return canonical_license(license)
    except UnknownLicenseError as err:
        raise IntakeError(str(err), code="invalid_license") from err


def check_publication(public: bool, license: str | None) -> tuple[bool, str | None]:
    """Validated (public, licence): publishing needs a licence (``models.submissions.zoo``).
    Raises IntakeError."""
    canonical = check_license(license)
    if public and canonical is None:
        raise IntakeError(
            "weights_public needs weights_license: name the SPDX licence the weights are "
            "published under (e.g. CC-BY-4.0, MIT or Apache-2.0)",
            code="license_required",
        )
    return public, canonical


def with_publication_checked(upload: Upload) -> Upload:
    """``upload`` with its licence in canonical SPDX spelling. Raises IntakeError when it
    publishes its weights without a (known) licence."""
    public, license = check_publication(upload.weights_public, upload.weights_license)
    return replace(upload, weights_public=public, weights_license=license)


def manifest_sha256(manifest: dict[str, Any]) -> str:
    """Hash of the canonical JSON form of a manifest (key order and spacing do not matter)."""
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def dedup_key(weights_sha256: str, manifest_hash: str, protocol_version: str) -> str:
    """Identity of a certification job: same weights + manifest + protocol = same results."""
    identity = f"{weights_sha256}:{manifest_hash}:{protocol_version}"
    return hashlib.sha256(identity.encode()).hexdigest()


def find_original(session: Session, key: str) -> Submission | None:
    """The oldest live or finished submission with this dedup key, if any."""
    return session.scalar(
        select(Submission)
        .where(Submission.dedup_key == key, Submission.state.in_(DEDUP_STATES))
        .order_by(Submission.id)
        .limit(1)
    )


def create_submission(
    session: Session,
    *,
    user: User,
    benchmark: Benchmark,
    upload: Upload,
    settings: Settings,
    forward_passes: int | None = None,
) -> Submission:
    """Store an upload and create its submission (state ``submitted``), or a ``duplicate`` row
    pointing at the existing identical submission (no file written, no quota used).

    ``forward_passes``: its estimated work (``models.runs.estimates``), stored, and charged to the
    daily compute quota in FLOPs (times the network's FLOPs per sample: as intake counted them,
    else counted here; ``models.submissions.compute_quota``); None skips that quota (tests that
    do not estimate).
    Safe under concurrency (see the module docstring). Raises QuotaExceededError (or
    IntakeError for an estimate beyond the compute quota) before anything is stored.
    """
    key = dedup_key(upload.weights_sha256, upload.manifest_sha256, benchmark.protocol_version)
    for attempt in range(INTAKE_ATTEMPTS):
        try:
            return _create_once(session, user=user, benchmark=benchmark, upload=upload, key=key,
                                settings=settings, forward_passes=forward_passes)  # fmt: skip
        except IntegrityError:
            # A concurrent identical original committed between our lookup and our insert; the
            # next attempt finds it. (``_create_once`` already rolled back and cleaned up.)
            if attempt + 1 == INTAKE_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _create_once(
    session: Session,
    *,
    user: User,
    benchmark: Benchmark,
    upload: Upload,
    key: str,
    settings: Settings,
    forward_passes: int | None,
) -> Submission:
    written: Path | None = None
    try:
        lock_user(session, user.id)
        artifacts.lock(session, upload.weights_sha256, size_bytes=upload.weights_size)
        original = find_original(session, key)
        if original is not None:
            return _create_duplicate(session, user=user, original=original, upload=upload, key=key)
        per_sample = upload.flops_per_sample or compute_quota.network_flops(upload.manifest)
        flops = None if forward_passes is None else forward_passes * per_sample
        quotas.decide(session, user, settings=settings, flops=flops)
        artifact, written = _store_artifact(session, upload, settings=settings)
        submission = Submission(
            user_id=user.id,
            benchmark_id=benchmark.id,
            artifact_id=artifact.id,
            state=S.SUBMITTED,
            message="waiting for validation",
            **upload.submission_columns(),
            protocol_version=benchmark.protocol_version,
            dedup_key=key,
            is_baseline=upload.is_baseline,
            estimated_forward_passes=forward_passes,
            flops_per_sample=per_sample,
        )
        session.add(submission)
        session.flush()
        run_seeds.draw(session, submission.id)  # the run's secret noise seed, committed
        session.add(
            SubmissionEvent(submission_id=submission.id, to_state=S.SUBMITTED, message="uploaded")
        )
        session.commit()
    except BaseException:
        artifacts.discard(session, written)
        raise
    return submission


def lock_user(session: Session, user_id: int) -> None:
    """Hold the user's row until the transaction ends, so this user's intakes are counted
    against the quotas one at a time. A no-op UPDATE: a row lock on PostgreSQL, the database
    write lock on SQLite (where SELECT ... FOR UPDATE does not exist)."""
    session.execute(
        update(User)
        .where(User.id == user_id)
        .values(id=User.id)
        .execution_options(synchronize_session=False)
    )


def _create_duplicate(
    session: Session, *, user: User, original: Submission, upload: Upload, key: str
) -> Submission:
    message = (
        f"identical to submission {original.id} (same weights, manifest and protocol "
        f"{original.protocol_version}); its results apply"
        if original.user_id == user.id or not original.is_private
        else "identical to an existing private submission (same weights, manifest and protocol)"
    )
    duplicate = Submission(
        user_id=user.id,
        benchmark_id=original.benchmark_id,
        artifact_id=original.artifact_id,
        state=S.DUPLICATE,
        reason=Reason.DUPLICATE.value,
        message=message,
        **upload.submission_columns(),
        protocol_version=original.protocol_version,
        dedup_key=key,
        duplicate_of_id=original.id,
        finished_at=utcnow(),
    )
    session.add(duplicate)
    session.flush()
    session.add(
        SubmissionEvent(
            submission_id=duplicate.id,
            to_state=S.DUPLICATE,
            reason=Reason.DUPLICATE.value,
            message=message,
        )
    )
    session.commit()
    return duplicate


def _store_artifact(
    session: Session, upload: Upload, *, settings: Settings
) -> tuple[Artifact, Path | None]:
    """Find or create the artifact row and make sure its weights file exists (the weights' row is
    locked by the caller). Returns (artifact, path written by this call or None) so the caller
    can undo the write."""
    sha, msha = upload.weights_sha256, upload.manifest_sha256
    relpath, written = artifacts.store(
        session,
        sha256=sha,
        size_bytes=upload.weights_size,
        settings=settings,
        data=None if upload.staged is not None else upload.weights,
        staged=upload.staged.path if upload.staged is not None else None,
    )
    artifact = session.scalar(
        select(Artifact).where(Artifact.sha256 == sha, Artifact.manifest_sha256 == msha)
    )
    if artifact is None:
        artifact = Artifact(
            sha256=sha,
            size_bytes=upload.weights_size,
            manifest=upload.manifest,
            manifest_sha256=msha,
            weights_path=relpath,
        )
        session.add(artifact)
    else:
        artifact.weights_path = relpath
    session.flush()
    return artifact, written
