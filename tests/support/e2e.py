"""Helpers of the e2e tests (their fixtures are in ``tests/e2e/conftest.py``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
import pytest
import redis
from psycopg import sql

import migrations
from models.core.settings import Settings
from models.db import accounts
from models.db.engine import dispose_engines, session_scope
from models.db.entities import Role
from tests.support import redis_claims, timing
from tests.support.flow import free_port, settings_from_env
from tests.support.processes import BIN, Service, service_env, start_worker, wait_for

POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"


REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379


#: Databases the e2e tests may claim: 15, 14 and 9..1 (10..13 are the API tests' first choice,
#: ``tests.support.api``, which claim theirs in the same registry; 0 holds the claims, see
#: redis_claims.py).
E2E_REDIS_DATABASES = [15, 14, *range(9, 0, -1)]


START_POSTGRES = (
    "PostgreSQL is not reachable at 127.0.0.1:5432 (database `test`, user postgres, trust auth): "
    "{err}. Start it, e.g. `service postgresql start` or `pg_ctlcluster 15 main start`, or "
    "`docker run -d -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust -e POSTGRES_DB=test "
    "postgres:16`."
)


START_REDIS = (
    "Redis is not reachable at 127.0.0.1:6379: {err}. Start it, e.g. `service redis-server start`, "
    "`redis-server --daemonize yes`, or `docker run -d -p 6379:6379 redis:7`."
)


#: Timings small enough for a test, in the order the worker requires (workers/config.py): soft <
#: hard < visibility timeout, heartbeat at most half the lease. A killed worker's shard is sent
#: again by the watchdog's reconciler once its claim lapses (lease 20 s after the last heartbeat,
#: then the next 5 s watchdog round), before Redis re-delivers the dead worker's message (45 s),
#: which then finds the shard claimed or recorded and does nothing: the deployment defaults' order.
SERVICE_ENV = {
    "CERTBENCH_SHARD_SIZE": "1",
    "CERTBENCH_WORKER_DEVICE": "cpu",
    "CERTBENCH_HEARTBEAT_SECONDS": "2",
    "CERTBENCH_SHARD_SOFT_TIME_LIMIT_SECONDS": "30",
    "CERTBENCH_SHARD_TIME_LIMIT_SECONDS": "40",
    "CERTBENCH_VISIBILITY_TIMEOUT_SECONDS": "45",
    "CERTBENCH_LEASE_SECONDS": "20",
    "CERTBENCH_WATCHDOG_INTERVAL_SECONDS": "5",
    "CERTBENCH_MAX_WEIGHTS_BYTES": str(3 * 1024 * 1024),
    "CERTBENCH_QUOTA_CONCURRENT": "20",
    "CERTBENCH_QUOTA_FAILED_PER_DAY": "50",
    "CERTBENCH_QUOTA_SUBMISSIONS_PER_DAY": "50",
    # A plug-in evaluation stage (test_e2e_stage_plugin), importable by the API and the workers.
    "CERTBENCH_STAGE_PLUGINS": "tests.support.toy_stage",
    "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
}


#: The limits a loaded machine stretches (``shard_limits``); the lease, heartbeat and watchdog
#: stay as they are, since the crash tests stage their faults against them.
SCALED_LIMITS = (
    "CERTBENCH_SHARD_SOFT_TIME_LIMIT_SECONDS",
    "CERTBENCH_SHARD_TIME_LIMIT_SECONDS",
    "CERTBENCH_VISIBILITY_TIMEOUT_SECONDS",
)


def shard_limits() -> dict[str, str]:
    """SERVICE_ENV's shard time limits and visibility timeout stretched by the time scale when a
    stack starts (``tests.support.timing``), in the same order: beside a second suite and
    ``certbench serve`` (load 30) a one-image shard ran past the 30 s soft limit and its run
    failed with ``time_limit``."""
    factor = timing.factor()
    return {name: str(round(float(SERVICE_ENV[name]) * factor)) for name in SCALED_LIMITS}


@contextmanager
def postgres_database() -> Iterator[str]:
    """A fresh database on the local PostgreSQL, dropped afterwards."""
    try:
        admin = psycopg.connect(
            POSTGRES_ADMIN, autocommit=True, connect_timeout=round(timing.seconds(5))
        )
    except psycopg.OperationalError as err:
        pytest.fail(START_POSTGRES.format(err=err), pytrace=False)
    name = f"certbench_e2e_{uuid.uuid4().hex[:12]}"
    with admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        dispose_engines()
        with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextmanager
def redis_database() -> Iterator[str]:
    """A Redis database index of E2E_REDIS_DATABASES that no other stack uses, claimed in a
    registry that survives the claimed database being flushed (``redis_claims``), emptied,
    and emptied and given back afterwards."""
    try:
        redis.Redis(REDIS_HOST, REDIS_PORT, socket_connect_timeout=timing.seconds(5)).ping()
    except redis.exceptions.ConnectionError as err:
        pytest.fail(START_REDIS.format(err=err), pytrace=False)
    held = redis_claims.claim(REDIS_HOST, REDIS_PORT, E2E_REDIS_DATABASES)
    if held is None:
        pytest.fail(
            f"every Redis database of {E2E_REDIS_DATABASES} is claimed by a running test "
            f"session (keys {redis_claims.CLAIM_KEY.format(index='*')} in database "
            f"{redis_claims.REGISTRY_DB}); delete the claims of sessions that are gone",
            pytrace=False,
        )
    try:
        yield f"redis://{REDIS_HOST}:{REDIS_PORT}/{held.index}"
    finally:
        redis_claims.release(REDIS_HOST, REDIS_PORT, held)


@dataclass
class Stack:
    """The running service: API base URL, an admin client, the worker, the shared settings."""

    env: dict[str, str]
    settings: Settings
    api: Service
    base: str
    admin: httpx.Client
    root: Path
    worker: Service | None = None
    workers_started: int = 0
    clients: list[httpx.Client] = field(default_factory=list)

    def start_worker(self) -> Service:
        self.workers_started += 1
        log = self.root / f"worker-{self.workers_started}.log"
        self.worker = start_worker(self.env, log, "--hostname", f"e2e{self.workers_started}@%h")
        return self.worker

    def client(self, token: str) -> httpx.Client:
        client = httpx.Client(
            base_url=self.base,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timing.seconds(60),
        )
        self.clients.append(client)
        return client

    def submitter(self, name: str) -> httpx.Client:
        """A new submitter with a token, both created through the admin REST API."""
        user = self.admin.post("/api/v1/admin/users", json={"name": name, "role": "submitter"})
        assert user.status_code == 201, user.text
        token = self.admin.post(f"/api/v1/admin/users/{user.json()['id']}/tokens", json={})
        assert token.status_code == 201, token.text
        return self.client(token.json()["token"])

    def services(self) -> tuple[Service, ...]:
        return tuple(s for s in (self.api, self.worker) if s is not None)


@contextmanager
def running_stack(root: Path, postgres_url: str, redis_url: str, *, worker: bool = True,
                  **overrides: str) -> Iterator[Stack]:  # fmt: skip
    """Migrated PostgreSQL, Redis, ``certbench serve`` (API only) and one ``certbench worker``
    (none with ``worker=False``: the test starts its own with ``Stack.start_worker``), with
    SERVICE_ENV, its limits stretched (``shard_limits``), and ``overrides`` as their
    environment."""
    env = service_env(
        CERTBENCH_DATA_DIR=str(root / "data"),
        CERTBENCH_DATABASE_URL=postgres_url,
        CERTBENCH_BROKER_URL=redis_url,
        **{**SERVICE_ENV, **shard_limits(), **overrides},
    )
    settings = settings_from_env(env)
    migrations.upgrade(settings)
    with session_scope(settings) as session:
        admin = accounts.create_user(session, name="root", role=Role.ADMIN)
        secret = accounts.create_token(session, user=admin, label="e2e").secret
    port = free_port()
    # One API process: serve's default (one per CPU, spawned by uvicorn) cost each stack two
    # more interpreters with the whole app (~10 s of CPU each on the 2-core CI machine); the
    # multi-process API is tests/api/test_api_serve_processes.py's subject.
    api = Service(
        [str(BIN / "certbench"), "serve", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--no-worker", "--no-load-benchmarks"],
        env,
        root / "api.log",
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    admin_client = httpx.Client(
        base_url=base, headers={"Authorization": f"Bearer {secret}"}, timeout=timing.seconds(60)
    )
    running = Stack(env=env, settings=settings, api=api, base=base, admin=admin_client, root=root)
    try:
        wait_for(lambda: _healthy(base), timeout=300, what="the API to answer", services=(api,))
        if worker:
            running.start_worker()
        yield running
    finally:
        for client in [*running.clients, admin_client]:
            client.close()
        if running.worker is not None:
            running.worker.stop()
        api.stop()


def _healthy(base: str) -> bool:
    try:
        return httpx.get(f"{base}/health", timeout=5).status_code == 200
    except httpx.TransportError:
        return False
