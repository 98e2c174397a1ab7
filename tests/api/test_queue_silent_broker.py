"""A broker whose link went silent (a partition: the TCP connection neither answers nor closes)
makes the API answer 503, not hang (issue 36): every Redis wait is bounded by
``CERTBENCH_BROKER_TIMEOUT_SECONDS`` (``models.core.queue.broker_timeouts``), and the transport
client's own timeout error counts as an unreachable queue. Before, ``enqueue_validation`` waited
on the reply forever and held its request with it."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from api.queue import JobQueue
from models.core.errors import ServiceUnavailableError
from models.core.queue import celery_config
from models.core.settings import Settings
from tests.support import timing


@pytest.fixture
def silent_broker() -> Iterator[str]:
    """A TCP server on the loopback that accepts connections and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in accepted:
            conn.close()
        server.close()


def _outcome(call, deadline: float) -> BaseException | str:
    """What ``call`` raised (or ``"returned"``), or ``"still waiting"`` at the deadline."""
    outcome: list[BaseException | str] = []

    def run() -> None:
        try:
            call()
            outcome.append("returned")
        except BaseException as err:  # handed to the test's assertion
            outcome.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(deadline)
    return outcome[0] if outcome else "still waiting"


@pytest.mark.parametrize("action", ["enqueue_validation", "ping"])
def test_a_silent_broker_is_unavailable_not_a_hang(silent_broker, tmp_path, action):
    settings = Settings(data_dir=tmp_path, broker_url=silent_broker, broker_timeout_seconds=1)
    queue = JobQueue(settings)
    call = (lambda: queue.enqueue_validation(1)) if action == "enqueue_validation" else queue.ping
    outcome = _outcome(call, timing.seconds(30))
    assert isinstance(outcome, ServiceUnavailableError), outcome
    assert "unreachable" in str(outcome)


def test_every_redis_wait_is_bounded_by_the_broker_timeout(tmp_path):
    settings = Settings(data_dir=tmp_path, broker_url="redis://db:6379/0", broker_timeout_seconds=7)
    options = celery_config(settings)["broker_transport_options"]
    assert options["socket_timeout"] == options["socket_connect_timeout"] == 7
    assert options["health_check_interval"] == 7 and options["socket_keepalive"] is True
