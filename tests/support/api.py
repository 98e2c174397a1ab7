"""Helpers of the api tests (their fixtures are in ``tests/api/conftest.py``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
import redis
from kombu import Connection

from models.core.queue import CONTROL_QUEUE, TASK_VALIDATE, celery_config
from models.core.settings import Settings
from tests.support import redis_claims, timing

REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379

#: The Redis databases the API tests claim first, the pytest-xdist process's own first (13 for
#: gw0, 12 for gw1, ...); when another test session holds them all, any other database of
#: 1..15 that nobody claimed. Claims go through the registry the end-to-end stacks use
#: (``redis_claims``), so neither a second suite nor an end-to-end stack ever shares a queue
#: with the API tests (a fixed database per process did: a second checkout's suite, or a stack
#: on the same database, took the validation messages a test was waiting for).
API_REDIS_DATABASES = (13, 12, 11, 10)
OTHER_REDIS_DATABASES = (*range(1, 10), 14, 15)


HOW_TO_START_REDIS = (
    "Redis is required for the integration tests and is not reachable at {url} ({err}). Start it "
    "(e.g. `redis-server --daemonize yes` or `service redis-server start`)."
)


def _preferred_databases() -> list[int]:
    """API_REDIS_DATABASES starting with this pytest-xdist process's, then the others."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    first = worker % len(API_REDIS_DATABASES)
    return [*API_REDIS_DATABASES[first:], *API_REDIS_DATABASES[:first], *OTHER_REDIS_DATABASES]


@contextmanager
def redis_database() -> Iterator[str]:
    """The URL of a Redis database only these tests use until the block ends: claimed in the
    registry, or the one CERTBENCH_TEST_REDIS_DB names (taken as given, unclaimed: for a single
    test process)."""
    explicit = os.environ.get("CERTBENCH_TEST_REDIS_DB")
    if explicit:
        yield f"redis://{REDIS_HOST}:{REDIS_PORT}/{explicit}"
        return
    url = f"redis://{REDIS_HOST}:{REDIS_PORT}"
    try:
        redis.Redis(REDIS_HOST, REDIS_PORT, socket_connect_timeout=timing.seconds(3)).ping()
    except redis.exceptions.ConnectionError as err:
        pytest.fail(HOW_TO_START_REDIS.format(url=url, err=err), pytrace=False)
    held = redis_claims.claim(REDIS_HOST, REDIS_PORT, _preferred_databases())
    if held is None:
        pytest.fail(
            f"every Redis database of 1..15 at {url} is claimed by a running test session (keys "
            f"{redis_claims.CLAIM_KEY.format(index='*')} in database {redis_claims.REGISTRY_DB})",
            pytrace=False,
        )
    try:
        yield f"{url}/{held.index}"
    finally:
        redis_claims.release(REDIS_HOST, REDIS_PORT, held)


def fresh_redis(url: str) -> None:
    """Empty the database of ``url`` (before and after each test that queues on it)."""
    try:
        redis.Redis.from_url(url, socket_connect_timeout=timing.seconds(3)).flushdb()
    except redis.exceptions.ConnectionError as err:
        pytest.fail(HOW_TO_START_REDIS.format(url=url, err=err), pytrace=False)


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
