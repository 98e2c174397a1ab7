"""Send jobs to the workers by Celery task *name*; the API never imports ``workers``.

The client app is configured from the same ``models.core.queue.celery_config`` as the workers, so in
embedded mode both sides use the same filesystem broker folder.
"""

from __future__ import annotations

from celery import Celery
from kombu.exceptions import KombuError

from models.core.errors import ServiceUnavailableError
from models.core.queue import CONTROL_QUEUE, TASK_VALIDATE, celery_config, ensure_embedded_queue
from models.core.settings import Settings


class JobQueue:
    """Producer side of the task queue (one per app; connections are pooled by Celery)."""

    def __init__(self, settings: Settings) -> None:
        ensure_embedded_queue(settings)
        self._celery = Celery("certbench-api", set_as_current=False)
        self._celery.conf.update(celery_config(settings))
        self._celery.conf.broker_connection_timeout = 5
        self._celery.conf.broker_connection_max_retries = 2
        # A producer's connection is retried once (2 s later: a Redis restart), not for as long
        # as broker_connection_timeout: on a silent link each attempt waits out
        # CERTBENCH_BROKER_TIMEOUT_SECONDS, and the request waits for every attempt.
        self._celery.conf.broker_transport_options = {
            **self._celery.conf.broker_transport_options,
            "max_retries": 1,
        }

    def enqueue_validation(self, submission_id: int) -> str:
        """Queue ``certbench.validate(submission_id)``; returns the task id.

        Raises ServiceUnavailableError when the broker cannot be reached.
        """
        try:
            result = self._celery.send_task(
                TASK_VALIDATE, args=[submission_id], queue=CONTROL_QUEUE, retry=False
            )
        except self._unreachable() as err:
            raise ServiceUnavailableError(
                f"the task queue is unreachable ({err}); check CERTBENCH_BROKER_URL and retry"
            ) from err
        return result.id

    def ping(self) -> None:
        """Open a broker connection (readiness). Raises ServiceUnavailableError."""
        try:
            with self._celery.connection_for_write() as connection:
                connection.ensure_connection(max_retries=1, timeout=2)
        except self._unreachable() as err:
            raise ServiceUnavailableError(f"the task queue is unreachable: {err}") from err

    def _unreachable(self) -> tuple[type[BaseException], ...]:
        """The errors of a broker that cannot be reached or did not answer in time: kombu's,
        the socket's, and the transport client's own (redis-py's ``TimeoutError`` and
        ``ConnectionError`` are neither)."""
        connection = self._celery.connection_for_write()
        try:
            return (KombuError, OSError, *connection.connection_errors)
        finally:
            connection.release()

    def close(self) -> None:
        self._celery.close()
