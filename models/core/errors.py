"""Errors of the service layer, all under ``certbench.errors.CertbenchError``.

Each carries a stable machine-readable ``code``; the API maps the classes to HTTP status codes
(``api.errors``), the workers to failed/rejected reasons. Messages name the thing and the fix.
"""

from __future__ import annotations

from certbench.errors import CertbenchError


class ServiceError(CertbenchError):
    """Base of service errors; ``code`` is the machine-readable name clients switch on."""

    code = "service_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self)


class NotFoundError(ServiceError):
    """The named object does not exist (or is private to someone else: same answer, no leak)."""

    code = "not_found"


class AuthenticationError(ServiceError):
    """Missing, unknown, expired or revoked API token."""

    code = "unauthenticated"


class PermissionDeniedError(ServiceError):
    """The caller is authenticated but lacks the role for this action."""

    code = "forbidden"


class InvalidTransitionError(ServiceError):
    """A state change the submission state machine does not allow (e.g. cancel a finished run)."""

    code = "invalid_transition"


class ConflictError(ServiceError):
    """The request clashes with existing data (duplicate user name, ...)."""

    code = "conflict"


class QuotaExceededError(ServiceError):
    """The user has used up a daily or concurrency quota.

    ``retry_after``: seconds until the request would fit (the API's ``Retry-After`` header),
    when that is known; ``details``: the numbers behind the refusal (usage, limit, request).
    """

    code = "quota_exceeded"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        retry_after: int | None = None,
        details: list[dict[str, object]] | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after
        self.details = details


class IntakeError(ServiceError):
    """An upload failed the cheap checks done before anything is stored; ``code`` is a Reason."""

    code = "invalid_submission"


class PayloadTooLargeError(IntakeError):
    """An uploaded part exceeds its size cap."""

    code = "too_large"


class BenchmarkDefinitionError(ServiceError):
    """A benchmark definition file is malformed or inconsistent."""

    code = "bad_benchmark_definition"


class StorageError(ServiceError):
    """An artifact path or file is unusable (missing file, path outside the artifacts dir)."""

    code = "storage_error"


class ServiceUnavailableError(ServiceError):
    """A backing service (database, broker) cannot be reached; retry later.

    ``submission_id`` names the submission the failure was recorded on, if any.
    """

    code = "unavailable"

    def __init__(
        self, message: str, *, code: str | None = None, submission_id: int | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.submission_id = submission_id


class DatasetMismatchError(ServiceError):
    """The data a worker loaded is not the data the benchmark definition pins (its content hash
    differs, or the pin cannot be checked where the data is read): the run fails with reason
    ``dataset_mismatch`` instead of scoring other bytes (``models.benchmarks.data_pins``)."""

    code = "dataset_mismatch"
