"""The faults, each a phase: submit the phase's runs, wait for the moment (a worker holding a
claim, an aggregate taken), inject, hold, heal, then wait until the phase's runs have ended.

Every step is timestamped into a :class:`FaultRecord` (epoch seconds, the clock the database's
timestamps share on this machine) for the checker and the report. All waits are bounded; a
moment that never comes is recorded as the phase's ``error`` rather than waited for forever.
"""

from __future__ import annotations

import itertools
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.fleet_check import pace
from scripts.fleet_check.client import Client, Run
from scripts.fleet_check.observe import Observer
from scripts.fleet_check.services import DB_PORT, REDIS_PORT, Services, Timings
from scripts.fleet_check.topology import Fleet

NETEM_WORKER = {"delay_ms": 200, "jitter_ms": 50, "loss": 0.10, "duplicate": 0.05, "reorder": 0.25}
NETEM_API = {"delay_ms": 200, "jitter_ms": 50, "loss": 0.15, "duplicate": 0.05, "reorder": 0.25}
RUN_TIMEOUT = 900.0
"""Seconds a phase's runs may take to end after the heal before the phase gives up on them."""


class PhaseError(RuntimeError):
    """The phase could not stage its fault (the moment never came)."""


@dataclass
class Context:
    """What the faults act on."""

    fleet: Fleet
    services: Services
    client: Client
    observer: Observer
    token: str
    timings: Timings
    workers: list[str]
    apis: list[str]
    log: Callable[[str], None]
    indices: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def host_of(self, worker_name: str) -> str | None:
        """The host of a claim's worker (``fleet-w2@machine/pid``, or its control consumer's
        ``fleet-w2-control@machine/pid`` → ``w2``)."""
        match = re.match(r"fleet-([a-z0-9]+)[-@]", worker_name)
        return match.group(1) if match else None


@dataclass
class FaultRecord:
    name: str
    title: str
    runs: list[int] = field(default_factory=list)
    submitted_at: float | None = None
    injected_at: float | None = None
    healed_at: float | None = None
    ended_at: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class Fault:
    """One phase: ``trigger`` waits for the moment and names the target; ``inject`` and ``heal``
    act on it; ``hold`` lasts while the fault is on."""

    name: str
    title: str
    trigger: Callable[[Context, list[Run]], dict[str, Any]]
    inject: Callable[[Context, dict[str, Any]], None]
    hold: Callable[[Context, dict[str, Any], FaultRecord], None]
    heal: Callable[[Context, dict[str, Any], FaultRecord], None]
    runs: int = 1


# --- triggers ---------------------------------------------------------------------------------


def _poll(what: str, probe: Callable[[], Any], timeout: float, interval: float = 0.2) -> Any:
    timeout = pace.seconds(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(interval)
    raise PhaseError(f"timed out after {timeout:.0f} s waiting for {what}")


def claimed(ctx: Context, runs: list[Run]) -> dict[str, Any]:
    """A worker host holding a live claim on a shard of the phase's first run."""

    def probe() -> dict[str, Any] | None:
        for key, worker in ctx.observer.claims(runs[0].id):
            host = ctx.host_of(worker)
            if host in ctx.workers:
                return {"host": host, "worker": worker, "shard": list(key), "run": runs[0].id}
        return None

    target: dict[str, Any] = _poll("a worker to claim a shard", probe, timeout=300)
    return target


def running(ctx: Context, runs: list[Run]) -> dict[str, Any]:
    """The phase's first run is running (its first shard claimed)."""
    _poll("the run to start", lambda: ctx.observer.claims(runs[0].id), timeout=300)
    return {"run": runs[0].id}


AGGREGATE_RECEIVED = re.compile(rb"Task certbench\.aggregate\[([0-9a-f-]+)\] received")


def aggregating(ctx: Context, runs: list[Run]) -> dict[str, Any]:
    """A worker host that took an aggregate of a phase's run and has not finished it, frozen
    (SIGSTOP) the moment its log says it received the task, so the kill lands inside it."""
    logs = {h: ctx.services.worker(h).log for h in ctx.workers}
    offsets = {h: (p.stat().st_size if p.exists() else 0) for h, p in logs.items()}
    deadline = time.monotonic() + 600
    missed = 0
    while time.monotonic() < deadline:
        for host, path in logs.items():
            with path.open("rb") as handle:
                handle.seek(offsets[host])
                chunk = handle.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]  # whole lines only
            offsets[host] += len(complete)
            for match in AGGREGATE_RECEIVED.finditer(complete):
                ctx.services.freeze_host(host)
                task = match.group(1).decode()
                if _mid_aggregate(ctx, runs, path, task):
                    return {"host": host, "task": task, "missed_before": missed}
                missed += 1
                ctx.services.thaw_host(host)
        time.sleep(0.02)
    raise PhaseError(f"no aggregate caught before it finished ({missed} missed)")


def _mid_aggregate(ctx: Context, runs: list[Run], log: Path, task: str) -> bool:
    """The frozen task has not succeeded and one of the phase's runs still runs with every shard
    recorded: the aggregate is under way."""
    if f"certbench.aggregate[{task}] succeeded".encode() in log.read_bytes():
        return False
    for run in runs:
        if ctx.observer.state(run.id) == "running":
            recorded = ctx.observer.recorded(run.id)
            total = ctx.observer.shards_total(run.id)
            if total and len(recorded) >= total:
                return True
    return False


# --- holds ------------------------------------------------------------------------------------


def sleep_for(seconds: float) -> Callable[[Context, dict[str, Any], FaultRecord], None]:
    def hold(_ctx: Context, _target: dict[str, Any], _record: FaultRecord) -> None:
        time.sleep(seconds)

    return hold


def until_taken_over(ctx: Context, target: dict[str, Any], record: FaultRecord) -> None:
    """Past the lease, and until another worker claimed or recorded the cut-off worker's shard
    (so the late result races a live claim), at most three leases more."""
    time.sleep(ctx.timings.lease + ctx.timings.watchdog)
    key = tuple(target["shard"])

    def taken() -> str | None:
        recorded = ctx.observer.recorded(target["run"]).get(key)  # type: ignore[call-overload]
        if recorded is not None:
            return f"recorded by {recorded}"
        holders = [w for k, w in ctx.observer.claims(target["run"]) if k == key]
        return f"claimed by {holders[0]}" if holders and holders[0] != target["worker"] else None

    try:
        record.details["taken_over"] = _poll(
            "another worker to take the shard over", taken, timeout=3 * ctx.timings.lease
        )
    except PhaseError as err:
        record.details["taken_over"] = str(err)


def probing_api(ctx: Context, target: dict[str, Any], record: FaultRecord) -> None:
    """While the API host is cut from the database, read and write through it: each answer is
    recorded (the checker wants 503 with Retry-After, never a 500 or a hang)."""
    host, probes = target["host"], []
    deadline = time.monotonic() + 20
    run_id = next(iter(ctx.client.runs))
    while time.monotonic() < deadline:
        for method, path in (
            ("GET", f"/api/v1/submissions/{run_id}"),
            ("GET", f"/api/v1/leaderboards/{ctx.client.benchmark}"),
        ):
            response = ctx.client.call(method, path, host=host, token=ctx.token)
            probes.append(_probe(method, path, response))
        time.sleep(1.0)
    index = next(ctx.indices)
    response = ctx.client.call(
        "POST",
        "/api/v1/submissions",
        host=host,
        token=ctx.token,
        files=_upload_files(index, ctx.client.benchmark),
    )
    probes.append(_probe("POST", "/api/v1/submissions", response))
    if response is not None and response.status_code == 202:
        record.runs.append(ctx.client.accepted(response, index, record.name).id)
    record.details["probes"] = probes


def _probe(method: str, path: str, response: Any) -> dict[str, Any]:
    if response is None:
        return {"request": f"{method} {path}", "status": None}
    return {
        "request": f"{method} {path}",
        "status": response.status_code,
        "retry_after": response.headers.get("retry-after"),
    }


def _upload_files(index: int, benchmark: str) -> dict[str, Any]:
    import io
    import json

    from scripts.fleet_check.client import tiny_upload

    weights, manifest = tiny_upload(index, benchmark)
    return {
        "weights": ("model.safetensors", io.BytesIO(weights), "application/octet-stream"),
        "manifest": ("manifest.json", json.dumps(manifest).encode(), "application/json"),
    }


# --- injections and heals -----------------------------------------------------------------------


def _heal_rule(rule: str) -> Callable[[Context, dict[str, Any], FaultRecord], None]:
    def heal(ctx: Context, _target: dict[str, Any], record: FaultRecord) -> None:
        record.details["frames"] = ctx.fleet.heal(rule)

    return heal


def _heal_rules(*rules: str) -> Callable[[Context, dict[str, Any], FaultRecord], None]:
    def heal(ctx: Context, _target: dict[str, Any], record: FaultRecord) -> None:
        record.details["frames"] = {rule: ctx.fleet.heal(rule) for rule in rules}

    return heal


def _api_heal(ctx: Context, target: dict[str, Any], record: FaultRecord) -> None:
    """Heal, then wait for the API host to answer a database read again, by itself."""
    record.details["frames"] = ctx.fleet.heal("api-db")
    healed = time.time()
    run_id = next(iter(ctx.client.runs))

    def answers() -> bool:
        response = ctx.client.call(
            "GET", f"/api/v1/submissions/{run_id}", host=target["host"], token=ctx.token
        )
        return response is not None and response.status_code == 200

    try:
        _poll(f"{target['host']} to answer again", answers, timeout=120, interval=0.5)
        record.details["api_recovered_after"] = time.time() - healed
    except PhaseError as err:
        record.details["api_recovered_after"] = None
        record.error = str(err)


def _restart_postgres(ctx: Context, _target: dict[str, Any], record: FaultRecord) -> None:
    from scripts.fleet_check.bringup import postgres_ready, wait_until

    pg = ctx.services.postgres().start(ctx.fleet)
    wait_until(lambda: postgres_ready(ctx.fleet), timeout=120, what="PostgreSQL", procs=(pg,))
    record.details["frames"] = {}


def _restart_redis(ctx: Context, _target: dict[str, Any], record: FaultRecord) -> None:
    ctx.services.redis().start(ctx.fleet)
    record.details["frames"] = {}


def _kill_redis(ctx: Context, _target: dict[str, Any]) -> None:
    """A crash of Redis without persistence: every queued and unacknowledged message is gone."""
    redis = ctx.services.redis()
    redis.signal_group(signal.SIGKILL)
    assert redis.popen is not None
    redis.popen.wait(timeout=30)


def _kill_host(ctx: Context, target: dict[str, Any]) -> None:
    target["killed"] = ctx.services.kill_host(target["host"])


def _restart_worker(ctx: Context, target: dict[str, Any], record: FaultRecord) -> None:
    ctx.services.worker(target["host"]).start(ctx.fleet)
    record.details["frames"] = {}


def catalogue(ctx: Context) -> dict[str, Fault]:
    """Every fault of the check, by name."""
    w_any = ctx.workers[-1]
    api_last = ctx.apis[-1]
    return {
        "worker-partition": Fault(
            "worker-partition",
            "a worker host cut from every host mid-shard for longer than its lease, then healed",
            claimed,
            lambda c, t: c.fleet.block("worker-all", t["host"]),
            until_taken_over,
            _heal_rule("worker-all"),
        ),
        "worker-broker-partition": Fault(
            "worker-broker-partition",
            "a worker host cut from Redis only (it still reaches PostgreSQL) mid-shard, 20 s",
            claimed,
            lambda c, t: c.fleet.block("worker-redis", t["host"], "db", REDIS_PORT),
            sleep_for(20),
            _heal_rule("worker-redis"),
        ),
        "worker-database-partition": Fault(
            "worker-database-partition",
            "a worker host cut from PostgreSQL only (it still reaches Redis) mid-shard, 20 s",
            claimed,
            lambda c, t: c.fleet.block("worker-pg", t["host"], "db", DB_PORT),
            sleep_for(20),
            _heal_rule("worker-pg"),
        ),
        "worker-netem": Fault(
            "worker-netem",
            f"netem on worker {w_any}'s link: 200 ± 50 ms, 10 % loss, 5 % duplicates, "
            "25 % reordered, 30 s",
            running,
            lambda c, t: c.fleet.impair("worker-netem", w_any, **NETEM_WORKER),
            sleep_for(30),
            _heal_rule("worker-netem"),
        ),
        "api-netem": Fault(
            "api-netem",
            f"netem on API {api_last}'s link: 200 ± 50 ms, 15 % loss, 5 % duplicates, "
            "25 % reordered, 30 s",
            running,
            lambda c, t: c.fleet.impair("api-netem", api_last, **NETEM_API),
            sleep_for(30),
            _heal_rule("api-netem"),
        ),
        "api-database-partition": Fault(
            "api-database-partition",
            f"API host {ctx.apis[0]} cut from PostgreSQL for 20 s while clients read and write "
            "through it",
            lambda c, runs: {**running(c, runs), "host": c.apis[0]},
            lambda c, t: c.fleet.block("api-db", t["host"], "db", DB_PORT),
            probing_api,
            _api_heal,
        ),
        "postgres-restart": Fault(
            "postgres-restart",
            "PostgreSQL restarted (fast shutdown, 3 s down) while shards run",
            claimed,
            lambda c, t: c.services.stop_postgres(),
            sleep_for(3),
            _restart_postgres,
        ),
        "redis-restart": Fault(
            "redis-restart",
            "Redis killed and restarted without persistence (every queued message lost) "
            "while shards run",
            claimed,
            _kill_redis,
            sleep_for(2),
            _restart_redis,
        ),
        "worker-kill-aggregate": Fault(
            "worker-kill-aggregate",
            "kill -9 of every process of the worker host running an aggregate, mid-aggregate; "
            "its worker restarted 5 s later",
            aggregating,
            _kill_host,
            sleep_for(5),
            _restart_worker,
            runs=2,
        ),
        "partition-and-lossy": Fault(
            "partition-and-lossy",
            "the smoke: a worker host cut from every host mid-shard past its lease while the "
            "other workers' links lose 10 % (200 ± 50 ms, duplicates, reordering)",
            claimed,
            _partition_and_lossy,
            until_taken_over,
            _heal_partition_and_lossy,
        ),
        "together": Fault(
            "together",
            f"at once: a worker host cut from everything past its lease, netem on {api_last}, "
            "and Redis killed and restarted without persistence",
            claimed,
            _together,
            until_taken_over,
            _heal_together,
        ),
    }


def _partition_and_lossy(ctx: Context, target: dict[str, Any]) -> None:
    """The smoke's pair: the claim holder cut off, every other worker's link lossy."""
    ctx.fleet.block("worker-all", target["host"])
    for k, host in enumerate(h for h in ctx.workers if h != target["host"]):
        ctx.fleet.impair(f"worker-netem-{k}", host, **NETEM_WORKER)


def _heal_partition_and_lossy(ctx: Context, target: dict[str, Any], record: FaultRecord) -> None:
    rules = ["worker-all", *(f"worker-netem-{k}" for k in range(len(ctx.workers) - 1))]
    record.details["frames"] = {rule: ctx.fleet.heal(rule) for rule in rules}


def _together(ctx: Context, target: dict[str, Any]) -> None:
    ctx.fleet.block("worker-all", target["host"])
    ctx.fleet.impair("api-netem", ctx.apis[-1], **NETEM_API)
    _kill_redis(ctx, target)
    ctx.services.redis().start(ctx.fleet)


def _heal_together(ctx: Context, _target: dict[str, Any], record: FaultRecord) -> None:
    record.details["frames"] = {rule: ctx.fleet.heal(rule) for rule in ("worker-all", "api-netem")}


def run_phase(ctx: Context, fault: Fault) -> FaultRecord:
    """Submit, wait for the moment, inject, hold, heal, wait for the phase's runs to end."""
    record = FaultRecord(fault.name, fault.title)
    runs = [ctx.client.submit(ctx.token, next(ctx.indices), fault.name) for _ in range(fault.runs)]
    record.runs = [r.id for r in runs]
    record.submitted_at = min(r.accepted_at for r in runs)
    ctx.log(f"{fault.name}: runs {record.runs} submitted")
    try:
        target = fault.trigger(ctx, runs)
    except PhaseError as err:
        record.error = str(err)
        ctx.log(f"{fault.name}: {err}")
    else:
        record.details["target"] = target
        record.injected_at = time.time()
        fault.inject(ctx, target)
        ctx.log(f"{fault.name}: injected on {target}")
        fault.hold(ctx, target, record)
        fault.heal(ctx, target, record)
        record.healed_at = time.time()
        ctx.log(f"{fault.name}: healed after {record.healed_at - record.injected_at:.1f} s")
    wait_runs(ctx, record)
    return record


def wait_runs(ctx: Context, record: FaultRecord) -> None:
    limit = pace.seconds(RUN_TIMEOUT)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        runs = [ctx.client.runs[i] for i in record.runs if i in ctx.client.runs]
        if all(r.ended_at is not None for r in runs) and len(runs) == len(record.runs):
            record.ended_at = max((r.ended_at or 0.0) for r in runs)
            ctx.log(f"{record.name}: runs ended: {[(r.id, r.state) for r in runs]}")
            return
        time.sleep(1.0)
    record.error = (record.error or "") + f" runs not ended within {limit:.0f} s"
