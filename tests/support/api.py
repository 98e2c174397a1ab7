"""Helpers of the api tests (their fixtures are in ``tests/api/conftest.py``)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
import redis
from kombu import Connection

from models.core.queue import CONTROL_QUEUE, TASK_VALIDATE, celery_config
from models.core.settings import Settings
from tests.support import timing

#: The API tests' Redis database: 13, minus the pytest-xdist worker's number (gw1 → 12), so that
#: parallel workers never flush each other's queues; CERTBENCH_TEST_REDIS_DB overrides it (two
#: checkouts side by side). The e2e tests claim databases below API_REDIS_DATABASES only.
API_REDIS_DATABASES = range(10, 14)


def _redis_db() -> str:
    explicit = os.environ.get("CERTBENCH_TEST_REDIS_DB")
    if explicit:
        return explicit
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    return str(API_REDIS_DATABASES[-1] - worker)


REDIS_URL = f"redis://127.0.0.1:6379/{_redis_db()}"


HOW_TO_START_REDIS = (
    "Redis is required for the integration tests and is not reachable at {url} ({err}). Start it "
    "(e.g. `redis-server --daemonize yes` or `service redis-server start`)."
)


def fresh_redis() -> None:
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=timing.seconds(3)).flushdb()
    except redis.exceptions.ConnectionError as err:
        pytest.fail(HOW_TO_START_REDIS.format(url=REDIS_URL, err=err), pytrace=False)


@dataclass
class Actors:
    """Bearer headers of a submitter (alice), another submitter (bob) and an admin (root)."""

    alice: dict[str, str]
    bob: dict[str, str]
    admin: dict[str, str]
    alice_id: int
    bob_id: int


def drain_validations(settings: Settings) -> list[int]:
    """Consume every message the API queued (as a worker would) and return the submission ids
    of the ``certbench.validate`` tasks, in order."""
    config = celery_config(settings)
    ids = []
    with Connection(
        config["broker_url"], transport_options=config["broker_transport_options"]
    ) as connection:
        queue = connection.SimpleQueue(CONTROL_QUEUE)
        try:
            while True:
                try:
                    message = queue.get(block=False)
                except queue.Empty:
                    break
                message.ack()
                assert message.headers["task"] == TASK_VALIDATE
                args, _kwargs, _embed = message.payload
                ids.append(args[0])
        finally:
            queue.close()
    return ids
