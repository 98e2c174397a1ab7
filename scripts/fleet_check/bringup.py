"""Bringing the fleet's services up, in dependency order, and waiting until each answers."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import httpx
import psycopg

from scripts.fleet_check import pace
from scripts.fleet_check.services import API_PORT, DB_NAME, DB_PORT, DB_USER, Proc, Services
from scripts.fleet_check.topology import Fleet


def wait_until(
    probe: Callable[[], object], *, timeout: float, what: str, procs: tuple[Proc, ...] = ()
) -> object:
    """Poll ``probe`` (every 0.5 s) until it returns something truthy; fail naming ``what``.
    ``timeout`` is stretched by ``--time-scale`` (``pace``)."""
    timeout = pace.seconds(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        for proc in procs:
            if not proc.alive():
                raise RuntimeError(
                    f"{proc.host}/{proc.name} exited while waiting for {what}:\n{proc.tail()}"
                )
        time.sleep(0.5)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


def postgres_ready(fleet: Fleet) -> bool:
    try:
        with psycopg.connect(
            host=fleet.address("db"),
            port=DB_PORT,
            user=DB_USER,
            dbname="postgres",
            connect_timeout=2,
        ):
            return True
    except psycopg.OperationalError:
        return False


def api_ready(fleet: Fleet, host: str) -> bool:
    try:
        url = f"http://{fleet.address(host)}:{API_PORT}/health"
        return httpx.get(url, timeout=3, trust_env=False).status_code == 200
    except httpx.TransportError:
        return False


def database_url(fleet: Fleet) -> str:
    return f"postgresql+psycopg://{DB_USER}@{fleet.address('db')}:{DB_PORT}/{DB_NAME}"


def start_database_host(fleet: Fleet, services: Services, *, first: bool) -> None:
    """PostgreSQL (initdb the first time) and Redis, waiting until PostgreSQL answers."""
    if first:
        services.init_postgres()
    pg = services.postgres().start(fleet)
    wait_until(lambda: postgres_ready(fleet), timeout=120, what="PostgreSQL", procs=(pg,))
    if first:
        services.create_database()
    services.redis().start(fleet)


def start_certbench(
    fleet: Fleet, services: Services, *, apis: list[str], workers: list[str]
) -> str:
    """Migrate (from the client host), the admin's token, the API hosts, the worker hosts.
    Returns the admin token."""
    services.certbench("client", "db", "upgrade")
    token = (
        services.certbench("client", "admin", "create-user", "fleet-admin", "--role", "admin")
        .strip()
        .splitlines()[-1]
    )
    procs = [services.api(host).start(fleet) for host in apis]
    procs += [services.worker(host).start(fleet) for host in workers]
    for host, proc in zip(apis, procs, strict=False):
        wait_until(
            functools.partial(api_ready, fleet, host),
            timeout=300,
            what=f"the API on {host}",
            procs=(proc,),
        )
    return token
