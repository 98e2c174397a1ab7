"""Each end-to-end stack owns its Redis database, even while a test flushes it.

CI refused a stop because the demo test's stack claimed the database the broker-loss test had just
FLUSHDB-ed on purpose (its claim marker lived inside that database), so two stacks' workers took
each other's tasks. These tests fail on that scheme.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import redis

from tests.support import redis_claims
from tests.support.e2e import E2E_REDIS_DATABASES, REDIS_HOST, REDIS_PORT, redis_database

pytestmark = [pytest.mark.integration]


def _index(url: str) -> int:
    return int(url.rsplit("/", 1)[1])


def test_a_flushed_database_stays_claimed():
    with redis_database() as first:
        redis.Redis.from_url(first).flushdb()  # what test_e2e_broker_loss does to its broker
        with redis_database() as second:
            assert _index(second) != _index(first)
            assert _index(second) in E2E_REDIS_DATABASES


def test_a_database_is_empty_when_claimed_and_when_given_back():
    with redis_database() as url:
        client = redis.Redis.from_url(url)
        assert client.dbsize() == 0
        client.set("left-behind", "1")
    assert client.dbsize() == 0


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_killed_sessions_claim_is_taken_over_and_a_live_one_is_not():
    held = redis_claims.claim(REDIS_HOST, REDIS_PORT, E2E_REDIS_DATABASES)
    assert held is not None
    registry = redis.Redis(REDIS_HOST, REDIS_PORT, db=redis_claims.REGISTRY_DB)
    key = redis_claims.CLAIM_KEY.format(index=held.index)
    host, pid, _ = held.owner.split(":")
    live, dead = f"{host}:{pid}:another-token", f"{host}:{_dead_pid()}:killed-run"
    ours = {held.owner, live, dead}
    try:
        registry.set(key, live)
        assert redis_claims.claim(REDIS_HOST, REDIS_PORT, [held.index]) is None
        redis.Redis(REDIS_HOST, REDIS_PORT, db=held.index).set("left-by-the-dead", "1")
        registry.set(key, dead)
        again = redis_claims.claim(REDIS_HOST, REDIS_PORT, [held.index])
        assert again is not None and again.index == held.index
        ours.add(again.owner)
        assert registry.get(key) == again.owner.encode()
        assert redis.Redis(REDIS_HOST, REDIS_PORT, db=held.index).dbsize() == 0
        redis_claims.release(REDIS_HOST, REDIS_PORT, again)
        assert registry.get(key) is None
    finally:  # a failed assertion above must not leave this index claimed
        if (registry.get(key) or b"").decode() in ours:
            registry.delete(key)
