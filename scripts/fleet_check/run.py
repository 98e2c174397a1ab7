"""One fleet check from start to teardown: build, bring up, baseline, faults, reproduce, check,
report. The teardown runs whatever happens (``finally``); the logs of a run whose invariants
broke are kept under ``<out>/logs``."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path
from typing import Any

from scripts.fleet_check import checker, netns, pace, topology
from scripts.fleet_check.bringup import database_url, start_certbench, start_database_host
from scripts.fleet_check.client import (
    DEMO,
    REQUEST_TIMEOUT,
    SMOKE,
    Client,
    Poller,
    demo_definition,
    tiny_upload,
)
from scripts.fleet_check.faults import Context, FaultRecord, catalogue, run_phase, wait_runs
from scripts.fleet_check.observe import Observer
from scripts.fleet_check.report import write_reports
from scripts.fleet_check.services import API_PORT, Services, Timings, service_env


def log(message: str) -> None:
    print(f"fleet-check {time.strftime('%H:%M:%S')} {message}", flush=True)


def check(
    *, smoke: bool, faults: list[str], seed: int, out: Path, small: bool, keep_logs: bool = False
) -> dict[str, Any]:
    """Run the check; write and return the report (the services' logs kept under
    ``<out>/logs`` when an invariant broke, the check failed, or ``keep_logs``)."""
    started = time.time()
    apis = ["api1"] if smoke else ["api1", "api2"]
    workers = ["w1", "w2"] if smoke else ["w1", "w2", "w3"]
    timings = (Timings(shard_size=4) if small else Timings()).scaled(pace.factor())
    fleet = topology.build(apis=len(apis), workers=len(workers), seed=seed)
    log(f"fleet {fleet.run}: {[h.name for h in fleet.hosts]} on {topology.SUBNET}.0/24")
    services = Services(fleet, service_env(fleet, timings))
    poller: Poller | None = None
    report: dict[str, Any] = {}
    # torch and the upload's model imported while the services start (the first upload's wait)
    threading.Thread(target=tiny_upload, args=(0,), name="fleet-warm-up", daemon=True).start()
    try:
        netns.enter(fleet.namespace("client"))
        start_database_host(fleet, services, first=True)
        admin = start_certbench(fleet, services, apis=apis, workers=workers)
        bringup = time.time() - started
        log(f"services up in {bringup:.0f} s")
        client = Client(
            {h: f"http://{fleet.address(h)}:{API_PORT}" for h in apis},
            SMOKE if small else DEMO,
            timeout=pace.seconds(REQUEST_TIMEOUT),
        )
        client.load_benchmark(admin, demo_definition(smoke=small))
        token = client.submitter(admin, "fleet-client")
        log(f"benchmark {client.benchmark} loaded, submitter created")
        poller = Poller(client, token)
        poller.start()
        ctx = Context(
            fleet,
            services,
            client,
            Observer(database_url(fleet)),
            token,
            timings,
            workers,
            apis,
            log,
        )
        baseline = None if smoke else _baseline(ctx)
        table = catalogue(ctx)
        records = [run_phase(ctx, table[name]) for name in faults]
        poller.stop()
        if poller.error is not None:
            raise poller.error
        report = _finish(ctx, records, baseline, started=started, bringup=bringup, smoke=smoke)
    finally:
        _shield_signals()  # a second Ctrl-C must not cut the teardown short
        if poller is not None:
            poller.stop()
        services.stop_all(grace=3.0)  # nothing left to finish: no warm shutdown wait
        broken = not report or not all(i["ok"] for i in report["invariants"])
        keep = out / "logs" if broken or keep_logs else None
        topology.destroy(fleet.run, fleet.workdir, grace=2.0, keep=keep)
        log(f"fleet {fleet.run} torn down" + (f"; logs kept in {keep}" if keep else ""))
    json_path, md_path = write_reports(report, out)
    log(f"wrote {json_path} and {md_path}")
    return report


def _shield_signals() -> None:
    """Ignore SIGINT, SIGTERM and SIGHUP from here on (only the main thread may set them)."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)


BASELINE_RUNS = 2
"""Undisturbed runs measured, one after another, after one that warms the fleet up (its workers'
first run loads the data and the model code: half as long again)."""


def _baseline(ctx: Context) -> float:
    """The undisturbed run's time, what every fault's delay is measured against: the mean of
    BASELINE_RUNS runs after a warm-up run (every one of them checked like the others)."""
    times = []
    for k in range(BASELINE_RUNS + 1):
        record = FaultRecord("baseline", "no fault")
        run = ctx.client.submit(ctx.token, next(ctx.indices), "baseline")
        record.runs = [run.id]
        wait_runs(ctx, record)
        ended = ctx.client.runs[run.id].ended_at
        if ended is None:
            raise RuntimeError(f"the undisturbed run {run.id} did not end: {record.error}")
        what = "warm-up" if k == 0 else "baseline"
        ctx.log(f"{what} run {run.id}: {ended - run.accepted_at:.1f} s")
        if k:
            times.append(ended - run.accepted_at)
    return sum(times) / len(times)


def _finish(
    ctx: Context,
    records: list[FaultRecord],
    baseline: float | None,
    *,
    started: float,
    bringup: float,
    smoke: bool,
) -> dict[str, Any]:
    """Facts, reproduction, invariants, table."""
    history = ctx.client.history()
    runs = {r["id"]: r for r in history["runs"]}
    facts = ctx.observer.facts(sorted(runs))
    progress = ctx.observer.progress_times(started)
    reproducing = time.time()
    reproduced = _reproduce(ctx, sorted(i for i, f in facts.items() if f.state == "finished"))
    reproduce_s = time.time() - reproducing
    identical = {
        i: all(r["identical"] for r in reproduced if r["run"] == i)
        and any(r["run"] == i for r in reproduced)
        for i in runs
    }
    table = checker.fault_rows(
        records, runs, facts, history["calls"], progress, baseline, identical
    )
    invariants = checker.invariants(runs, facts, history["calls"], reproduced, records)
    return {
        "smoke": smoke,
        "benchmark": ctx.client.benchmark,
        "hosts": ", ".join(f"{h.name} {h.address}" for h in ctx.fleet.hosts),
        "settings": ctx.timings.env(),
        "started_at": started,
        "seconds": time.time() - started,
        "bringup_s": bringup,
        "reproduce_s": reproduce_s,
        "baseline_s": None if baseline is None else round(baseline, 1),
        "faults_table": table,
        "invariants": invariants,
        "faults": [asdict(r) for r in records],
        "runs": history["runs"],
        "reproduced": reproduced,
        "facts": checker.facts_json(facts),
        "calls": history["calls"],
    }


def _reproduce(ctx: Context, ids: list[int]) -> list[dict[str, Any]]:
    """Each run computed again undisturbed, one process per CPU (spawned from this thread, so in
    the client's namespace, reaching the fleet's database), in a folder of the fleet's work
    folder (removed with it whatever happens)."""
    from models.core.settings import Settings
    from scripts.fleet_check.reproduce import reproduce

    env = ctx.services.env
    settings = Settings(
        environment="production",
        database_url=env["CERTBENCH_DATABASE_URL"],
        broker_url=env["CERTBENCH_BROKER_URL"],
        data_dir=Path(env["CERTBENCH_DATA_DIR"]),
    )
    scratch = ctx.fleet.workdir / "reproduce"
    scratch.mkdir(exist_ok=True)
    processes = max(1, min(len(ids), os.cpu_count() or 1))
    rows: list[dict[str, Any]] = []
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(processes, mp_context=spawn) as pool:
        running = {pool.submit(reproduce, settings, i, scratch): i for i in ids}
        for done in as_completed(running):
            mine = done.result()
            rows += mine
            same = all(r["identical"] for r in mine)
            ctx.log(f"reproduced run {running[done]}: {'identical' if same else 'DIFFERENT'}")
    return sorted(rows, key=lambda r: (r["run"], r["stage"], r["unit"]))
