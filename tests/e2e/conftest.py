"""The whole service as separate processes: PostgreSQL, Redis, the API (uvicorn) and a worker.

Every run gets its own PostgreSQL database (created here, dropped afterwards) and claims an idle
Redis database index, so parallel runs and other test suites never share queues or rows. When
PostgreSQL or Redis is not running the tests FAIL with the command that starts it.

The stack, its database and its Redis database are package fixtures: shared by the files of
``tests/e2e`` that a test process runs one after another, and stopped when it moves on to
another folder, not kept to the end of the session: each stack holds about 1 GiB, and a suite's
three test processes kept theirs through the whole run (``tests.support.memory``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.e2e import (
    Stack,
    postgres_database,
    redis_database,
    running_stack,
)
from tests.support.flow import put_benchmark


@pytest.fixture(scope="package")
def postgres_url() -> Iterator[str]:
    with postgres_database() as url:
        yield url


@pytest.fixture(scope="package")
def redis_url() -> Iterator[str]:
    with redis_database() as url:
        yield url


@pytest.fixture(scope="package")
def stack(postgres_url: str, redis_url: str, tmp_path_factory) -> Iterator[Stack]:
    """The shared service for the end-to-end tests."""
    with running_stack(tmp_path_factory.mktemp("e2e"), postgres_url, redis_url) as running:
        yield running


@pytest.fixture(scope="package")
def tiny(stack: Stack) -> dict[str, object]:
    """The tiny two-test-set benchmark, loaded through the admin REST API."""
    return put_benchmark(stack, "tiny-dataset")
