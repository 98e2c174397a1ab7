"""Submit the packaged reference entries (``models.catalog.reference_entries``) through the
pipeline.

``certbench serve`` calls this once before the API starts (``CERTBENCH_DEMO_REFERENCES`` /
``--no-demo-references`` turn it off): each reference of a loaded benchmark that its account has
not submitted yet passes the same checks as an upload (``api.services.intake``), becomes a public
baseline submission of ``REFERENCE_USER`` with its weights published in the model zoo under
``REFERENCE_LICENSE`` (Apache-2.0, the project's licence), and is queued for validation, so the
workers certify it like any other entry. A queue that is down leaves it ``submitted``: the
watchdog's reconciler sends its validation later. A reference the benchmark no longer accepts (a
changed definition) is skipped with a warning rather than stopping the service.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.queue import JobQueue
from api.services.intake import (
    check_against_benchmark,
    check_data_available,
    check_weights,
    parse_manifest,
)
from certbench.denoising import composition_label
from models.catalog.reference_entries import (
    REFERENCE_LICENSE,
    ReferenceEntry,
    packaged_references,
    publish_submitted,
    reference_user,
    submitted,
)
from models.core.errors import IntakeError, QuotaExceededError, ServiceUnavailableError
from models.core.settings import Settings
from models.db.engine import session_scope
from models.db.entities import Benchmark
from models.db.states import SubmissionState
from models.submissions.intake import Upload, create_submission, dedup_key, lock_user

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """What became of one reference: ``submitted`` (with its id), ``present`` (submitted
    before), ``unloaded`` (its benchmark is not in the database) or ``skipped`` (why: message)."""

    benchmark: str
    key: str
    status: str
    submission_id: int | None = None
    message: str = ""


def submit_reference_entries(
    settings: Settings, queue: JobQueue, references: list[ReferenceEntry] | None = None
) -> list[Outcome]:
    """Submit every packaged reference (or ``references``) missing from its benchmark."""
    outcomes = []
    with session_scope(settings) as session:
        for reference in packaged_references() if references is None else references:
            outcomes.append(_submit_one(session, settings, queue, reference))
    return outcomes


def _submit_one(
    session: Session, settings: Settings, queue: JobQueue, reference: ReferenceEntry
) -> Outcome:
    def outcome(status: str, submission_id: int | None = None, message: str = "") -> Outcome:
        return Outcome(reference.benchmark, reference.key, status, submission_id, message)

    benchmark = session.scalar(select(Benchmark).where(Benchmark.name == reference.benchmark))
    if benchmark is None:
        return outcome("unloaded", message=f"benchmark {reference.benchmark!r} is not loaded")
    try:
        manifest = parse_manifest(reference.manifest)
        check_against_benchmark(session, manifest)
        check_data_available(benchmark, settings)
        check_weights(reference.weights, manifest)
    except IntakeError as err:
        log.warning("reference %s/%s not submitted: %s", reference.benchmark, reference.key, err)
        return outcome("skipped", message=str(err))
    upload = Upload(
        weights=reference.weights,
        manifest=manifest.model_dump(mode="json"),
        model_name=manifest.metadata.name,
        architecture=composition_label(manifest.denoiser, manifest.architecture.name),
        sigma=manifest.smoothing.sigma,
        is_baseline=True,
        weights_public=True,
        weights_license=REFERENCE_LICENSE,
    )
    user = reference_user(session)
    key = dedup_key(upload.weights_sha256, upload.manifest_sha256, benchmark.protocol_version)
    session.commit()  # the lock below opens a fresh transaction, so it sees every earlier commit
    lock_user(session, user.id)
    if submitted(session, user, benchmark.id, key):
        if publish_submitted(session, user, benchmark.id, key):
            session.commit()
            return outcome("present", message=f"weights published under {REFERENCE_LICENSE}")
        session.rollback()
        return outcome("present")
    try:
        submission = create_submission(
            session, user=user, benchmark=benchmark, upload=upload, settings=settings
        )
    except QuotaExceededError as err:
        log.warning(
            "reference %s/%s waits for the next start: %s", benchmark.name, reference.key, err
        )
        return outcome("skipped", message=str(err))
    if submission.state == SubmissionState.SUBMITTED:
        try:
            queue.enqueue_validation(submission.id)
        except ServiceUnavailableError as err:
            log.warning(
                "reference submission %s stays queued for the watchdog to send: %s",
                submission.id,
                err,
            )
    return outcome("submitted", submission.id)
