"""A database client cut off mid-transaction does not keep its row locks until the partition
heals (issue 36): the connection parameters of the service's engine (``NetworkTimeouts``) make
the PostgreSQL server end a session whose client went silent, so the other workers' updates of
the same rows go on. Found by ``scripts/fleet-check``: with a worker partitioned between two
statements of a transaction, every shard of the run waited for the heal.

Runs on a fleet of three network namespaces (the database host, a worker host, a client) like
``scripts/fleet-check``'s; needs root and ``ip netns`` and FAILS saying what is missing."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from models.db.engine import NetworkTimeouts
from tests.support import timing

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.fleet_check import netns, topology  # noqa: E402
from scripts.fleet_check.bringup import postgres_ready, wait_until  # noqa: E402
from scripts.fleet_check.main import missing_requirements  # noqa: E402
from scripts.fleet_check.services import DB_NAME, DB_PORT, DB_USER, Services, Timings, service_env  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.fixture
def fleet() -> Iterator[tuple[topology.Fleet, Services]]:
    missing = missing_requirements()
    if missing:
        pytest.fail("no fleet on this machine; missing: " + "; ".join(missing), pytrace=False)
    built = topology.build(apis=0, workers=1, seed=1)
    services = Services(built, service_env(built, Timings()))
    try:
        services.init_postgres()
        pg = services.postgres().start(built)
        with netns.inside(built.namespace("client")):
            wait_until(lambda: postgres_ready(built), timeout=timing.seconds(60),
                       what="PostgreSQL", procs=(pg,))  # fmt: skip
        services.create_database()
        yield built, services
    finally:
        services.stop_all(grace=5)
        topology.destroy(built.run, built.workdir, grace=1)


def _connect(fleet: topology.Fleet, host: str, **params: object) -> psycopg.Connection:
    """A connection from ``host``'s namespace (the socket stays there)."""
    with netns.inside(fleet.namespace(host)):
        return psycopg.connect(host=fleet.address("db"), port=DB_PORT, user=DB_USER,
                               dbname=DB_NAME, **params)  # fmt: skip


def test_a_partitioned_clients_locks_are_released_before_the_heal(fleet):
    built, _services = fleet
    with _connect(built, "client", autocommit=True) as admin:
        admin.execute("CREATE TABLE claims (id int PRIMARY KEY, holder text)")
        admin.execute("INSERT INTO claims VALUES (1, NULL)")
    timeouts = NetworkTimeouts(connect=5, tcp=4)
    worker = _connect(built, "w1", **timeouts.connect_args())
    worker.execute("UPDATE claims SET holder = 'w1' WHERE id = 1")  # the transaction stays open
    held_by = worker.info.backend_pid
    built.block("cut", "w1")  # w1 partitioned from every host, its transaction open
    other = _connect(built, "client", autocommit=True)
    try:
        limit = timing.seconds(60)
        other.execute(f"SET lock_timeout = '{int(limit)}s'")
        # waits on w1's lock; lock_timeout (an error) if w1's session outlived the partition
        other.execute("UPDATE claims SET holder = 'client' WHERE id = 1")
        sessions = other.execute("SELECT pid FROM pg_stat_activity").fetchall()
        assert held_by not in {pid for (pid,) in sessions}, "w1's session still open"
        assert other.execute("SELECT holder FROM claims").fetchone() == ("client",)
    finally:
        other.close()
        built.heal("cut")
        worker.close()
