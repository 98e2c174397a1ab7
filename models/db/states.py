"""The submission state machine and the machine-readable reasons attached to transitions.

submitted → validating → queued → running → finished | failed | rejected | cancelled | duplicate.
The table below is the only place that says which moves are legal;
``models.submissions.lifecycle.transition`` enforces it with a compare-and-set update, so two
processes can never both move one submission.
"""

from __future__ import annotations

from enum import StrEnum


class SubmissionState(StrEnum):
    """Lifecycle of one submission."""

    SUBMITTED = "submitted"
    VALIDATING = "validating"
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    DUPLICATE = "duplicate"


S = SubmissionState

#: Legal moves. Re-running (admin) goes back to ``submitted`` from a finished or dead state.
TRANSITIONS: dict[SubmissionState, frozenset[SubmissionState]] = {
    S.SUBMITTED: frozenset({S.VALIDATING, S.REJECTED, S.FAILED, S.CANCELLED}),
    S.VALIDATING: frozenset({S.QUEUED, S.REJECTED, S.FAILED, S.CANCELLED}),
    S.QUEUED: frozenset({S.RUNNING, S.FAILED, S.CANCELLED}),
    S.RUNNING: frozenset({S.FINISHED, S.FAILED, S.CANCELLED}),
    S.FINISHED: frozenset({S.SUBMITTED}),
    S.FAILED: frozenset({S.SUBMITTED}),
    S.REJECTED: frozenset({S.SUBMITTED}),
    S.CANCELLED: frozenset({S.SUBMITTED}),
    S.DUPLICATE: frozenset(),
}

#: States in which work is pending or under way (count against the concurrency quota).
ACTIVE_STATES = frozenset({S.SUBMITTED, S.VALIDATING, S.QUEUED, S.RUNNING})
#: States waiting for a worker (queue position is counted among these).
WAITING_STATES = frozenset({S.SUBMITTED, S.VALIDATING, S.QUEUED})
#: States that will not change without an admin re-run.
TERMINAL_STATES = frozenset({S.FINISHED, S.FAILED, S.REJECTED, S.CANCELLED, S.DUPLICATE})
#: Submissions that ended badly; counted against their own daily quota.
UNSUCCESSFUL_STATES = frozenset({S.FAILED, S.REJECTED})
#: Submissions an identical upload is a duplicate of (dead ones may be submitted again).
DEDUP_STATES = frozenset({S.SUBMITTED, S.VALIDATING, S.QUEUED, S.RUNNING, S.FINISHED})
#: Submissions that ended without an entry (failed, rejected, cancelled, duplicate): only their
#: owner and admins see them, with the reason; public pages and REST never show them.
NO_ENTRY_STATES = frozenset(SubmissionState) - DEDUP_STATES


class Reason(StrEnum):
    """Machine-readable reason codes stored next to the human message of a transition."""

    # rejected: the upload itself is unusable (set by the API's cheap checks or the validate task)
    NOT_SAFETENSORS = "not_safetensors"
    TRUNCATED = "truncated_weights"
    BAD_MANIFEST = "bad_manifest"
    UNKNOWN_ARCHITECTURE = "unknown_architecture"
    STATE_DICT_MISMATCH = "state_dict_mismatch"
    INPUT_SIZE = "input_size"
    BAD_OUTPUT = "bad_output"
    NON_FINITE_OUTPUT = "non_finite_output"
    BENCHMARK_MISMATCH = "benchmark_mismatch"
    SIGMA_NOT_ALLOWED = "sigma_not_allowed"
    TOO_LARGE = "too_large"
    HEADER_TOO_LARGE = "weights_header_too_large"
    DUPLICATE_TENSOR = "duplicate_tensor_name"
    BAD_PREPROCESSING = "bad_preprocessing"
    NON_FINITE_WEIGHTS = "non_finite_weights"
    # failed: infrastructure or runtime trouble, not the submitter's fault
    LEASE_EXPIRED = "lease_expired"
    WORKER_ERROR = "worker_error"
    DATASET_UNAVAILABLE = "dataset_unavailable"
    DATASET_MISMATCH = "dataset_mismatch"
    ANCHORS_UNAVAILABLE = "anchors_unavailable"
    ARTIFACT_MISSING = "artifact_missing"
    TIME_LIMIT = "time_limit"
    QUEUE_UNAVAILABLE = "queue_unavailable"
    # others
    CANCELLED_BY_USER = "cancelled_by_user"
    CANCELLED_BY_ADMIN = "cancelled_by_admin"
    RERUN = "rerun"
    DUPLICATE = "duplicate"
    VALIDATED = "validated"
    STARTED = "started"
    COMPLETED = "completed"


def can_transition(source: SubmissionState, target: SubmissionState) -> bool:
    """Whether ``source → target`` is a legal move."""
    return target in TRANSITIONS[source]
