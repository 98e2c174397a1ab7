"""REST API load: the leaderboard page with 10,000 entries on SQLite and on PostgreSQL: requests
per second per core, p50/p95 at 1 client, and the throughput of several API processes against
one (issue 27 §1); also the benchmark list and, optionally, submission intake.

    uv run python benchmarks/api_load.py                     # 10,000 entries, both databases
    uv run python benchmarks/api_load.py --smoke             # tiny sizes, SQLite: seconds
    uv run python benchmarks/api_load.py --postgres-url postgresql://postgres@127.0.0.1:5432/test \
        --redis-url redis://127.0.0.1:6379/14 --processes 2 --uploads 40

The client is this process, the server ``certbench serve`` (a subprocess on 127.0.0.1, loopback
only, bounded loops), run with ``--workers 1`` and with ``--workers`` ``--processes``. The
one-process server is the reference run in the same process: the report prints the throughput
ratio of ``--processes`` processes to it at each client count. That Python client spends about
as much CPU per request as the server, so on a small machine it caps the ratio; where ``wrk`` is
installed (``apt-get install wrk``) the page is also loaded by it for ``--wrk-seconds`` over
``--wrk-connections`` connections, and that ratio is the one that shows how the API scales.
Requests per core is 1,000 / the server CPU milliseconds per request (user + system of the API
processes, from /proc), which the load of a shared machine does not distort the way wall-clock
throughput is distorted.

For each backend: a fresh database (SQLite file in a temp dir / a new database on the PostgreSQL
server of ``--postgres-url``, dropped afterwards) migrated with Alembic and seeded in bulk with
``--entries`` finished submissions through the tables the pipeline writes: artifacts with
manifests, submissions, leaderboard entries, every figure of the benchmark as a
``metric_values`` row (a tenth without the robustness stage's figures, as entries finished
before a stage was added) and the read model's rows by its own writer
(``models.boards.read_model.refresh``). Reads cycle through sort keys, orders, deep pages,
filters and search. The service function called without HTTP in this process shows what the
web stack adds. Intake (``--uploads``, 0 by default) posts distinct valid safetensors uploads (a
cifar_resnet20, ~1 MB) through the full path; with PostgreSQL its Celery messages go to
``--redis-url`` (nothing is flushed there), else to the embedded broker.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlencode

import httpx
import psycopg
from psycopg import sql
from sqlalchemy import insert, select, text
from sqlalchemy.orm import Session

import migrations
from api.services.leaderboard_page import leaderboard_json as leaderboard_service
from models.boards import read_model as leaderboard_rows
from models.boards.leaderboard import LeaderboardQuery, benchmark_metric_specs
from models.catalog.benchmarks import packaged_definitions, upsert_benchmark
from models.core.settings import Settings
from models.db.accounts import create_token, create_user
from models.db.base import utcnow
from models.db.engine import dispose_engines, session_scope
from models.db.entities import (
    Artifact,
    Benchmark,
    LeaderboardEntry,
    MetricValue,
    Role,
    Submission,
    User,
)
from models.db.states import SubmissionState

BENCHMARK = "cifar10"
POSTGRES_URL = os.environ.get(
    "CERTBENCH_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
SORTS = ("macr", "cert_acc_025", "cert_acc_050", "cert_acc_100", "abstain_rate", "pa_median",
         "sigma", "submitted", "model_name", "pd_acc_8", "linf_acc_16")  # fmt: skip
ARCHITECTURES = ("cifar_resnet20", "cifar_resnet56", "cifar_resnet110", "wrn")
ROBUSTNESS_KEYS = ("base_accuracy", "linf_acc_8", "linf_acc_16", "pd_acc_8", "pd_acc_16")
BATCH = 2000


def figures(rng: random.Random, keys: list[str], *, robustness: bool) -> dict[str, float | None]:
    """Plausible figures for every key of the benchmark: certified accuracy falling with the
    radius, the base classifier's clean ≥ ℓ∞∩PD ≥ ℓ∞ (16/255 ≤ 8/255), intervals around each
    figure; the robustness stage's figures missing (None) without it."""
    acc = sorted((rng.random() for _ in range(5)), reverse=True)
    clean = rng.uniform(0.6, 0.95)
    pd8, pd16 = sorted((rng.uniform(0, clean) for _ in range(2)), reverse=True)
    known = {"macr": rng.random(), "cert_acc_000": acc[0], "cert_acc_025": acc[1],
             "cert_acc_050": acc[2], "cert_acc_075": acc[3], "cert_acc_100": acc[4],
             "clean_accuracy": acc[0], "abstain_rate": rng.random() * 0.3,
             "pa_median": 0.5 + rng.random() / 2, "base_accuracy": clean, "pd_acc_8": pd8,
             "pd_acc_16": pd16, "linf_acc_8": pd8 * rng.random(),
             "linf_acc_16": pd16 * rng.random()}  # fmt: skip
    out: dict[str, float | None] = {}
    for key in keys:
        base = key.removesuffix("_ci_low").removesuffix("_ci_high")
        value = known.get(base, rng.random())
        if key.endswith("_ci_low"):
            value *= 0.97
        elif key.endswith("_ci_high"):
            value = min(1.0, value * 1.03)
        out[key] = None if not robustness and base in ROBUSTNESS_KEYS else value
    return out


def store_figures(
    session: Session, benchmark: Benchmark, ids: list[int], rng: random.Random
) -> None:
    """Every figure of the benchmark for the entries ``ids`` as ``metric_values`` rows (a tenth
    without the robustness stage's), then their read-model rows by its own writer."""
    keys = [spec.key for spec in benchmark_metric_specs(benchmark)]
    values = []
    for i, sid in enumerate(ids):
        for key, value in figures(rng, keys, robustness=i % 10 != 0).items():
            stage = "pd_robustness" if key.split("_ci_")[0] in ROBUSTNESS_KEYS else (
                "certification")  # fmt: skip
            values.append({"submission_id": sid, "benchmark_id": benchmark.id, "stage": stage,
                           "key": key, "value": value})  # fmt: skip
    for start in range(0, len(values), BATCH * 10):
        session.execute(insert(MetricValue), values[start : start + BATCH * 10])
    for start in range(0, len(ids), BATCH):
        leaderboard_rows.refresh(session, ids[start : start + BATCH])


def seed(settings: Settings, entries: int, rng: random.Random) -> str:
    """Bulk-insert ``entries`` finished, ranked submissions with every figure of the benchmark
    and their read-model rows; returns an admin token."""
    with session_scope(settings) as session:
        definition = next(d for d in packaged_definitions() if d.name == BENCHMARK)
        benchmark = upsert_benchmark(session, definition)
        admin = create_user(session, name="bench-admin", role=Role.ADMIN)
        token = create_token(session, user=admin).secret
        users = [{"name": f"user{i:03d}", "role": Role.SUBMITTER} for i in range(100)]
        session.execute(insert(User), users)
        user_ids = list(session.scalars(select(User.id).where(User.name.like("user%"))))
        now = utcnow()
        artifacts, submissions, board = [], [], []
        for i in range(entries):
            sid = i + 1
            sigma = rng.choice((0.12, 0.25, 0.5, 1.0))
            meta = {"name": f"model-{i:05d}", "authors": ["A. Author"], "paper_url": None,
                    "code_url": None, "licence": "MIT"}  # fmt: skip
            artifacts.append(
                {"id": sid, "sha256": f"{sid:064x}", "size_bytes": 1_100_000,
                 "manifest": {"benchmark": BENCHMARK, "metadata": meta,
                              "smoothing": {"sigma": sigma}},
                 "manifest_sha256": f"{sid:064x}", "weights_path": None, "created_at": now}
            )  # fmt: skip
            submissions.append(
                {"id": sid, "user_id": rng.choice(user_ids), "benchmark_id": benchmark.id,
                 "artifact_id": sid, "state": SubmissionState.FINISHED, "message": "",
                 "is_private": rng.random() < 0.05, "hidden": rng.random() < 0.01,
                 "flagged": rng.random() < 0.02, "is_baseline": False,
                 "model_name": meta["name"], "architecture": rng.choice(ARCHITECTURES),
                 "sigma": sigma, "extra_data": rng.random() < 0.2,
                 "venue": rng.choice(("ICML", "NeurIPS", "ICLR", None)),
                 "protocol_version": benchmark.protocol_version, "dedup_key": f"{sid:064x}",
                 "attempt": 0, "shards_total": 5, "shards_done": 5, "progress": 1.0,
                 "created_at": now - timedelta(minutes=entries - i), "updated_at": now,
                 "finished_at": now}
            )  # fmt: skip
            board.append(
                {"submission_id": sid, "benchmark_id": benchmark.id,
                 "protocol_version": benchmark.protocol_version, "test_sets": 1, "count": 500,
                 "seconds": 60.0, "finished_at": now}
            )  # fmt: skip
        for table, rows in ((Artifact, artifacts), (Submission, submissions),
                            (LeaderboardEntry, board)):  # fmt: skip
            for start in range(0, len(rows), BATCH):
                session.execute(insert(table), rows[start : start + BATCH])
        store_figures(session, benchmark, list(range(1, entries + 1)), rng)  # the ids above
        session.commit()
        if settings.database_url.startswith("postgresql"):
            for name in ("artifacts", "submissions"):  # explicit ids: move the sequences on
                session.execute(
                    text(f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                         f"(SELECT max(id) FROM {name}))")
                )  # fmt: skip
            session.execute(text("ANALYZE"))
            session.commit()
        return token


def read_params(rng: random.Random, entries: int) -> dict[str, object]:
    """A mix of what browsing does: first pages of every sort, deep pages, filters, search."""
    params: dict[str, object] = {"sort": rng.choice(SORTS), "order": rng.choice(("asc", "desc"))}
    roll = rng.random()
    if roll < 0.5:
        params["offset"] = 0
    elif roll < 0.75:
        params["offset"] = rng.randrange(0, max(1, entries - 50))
    elif roll < 0.9:
        params["sigma"] = rng.choice((0.12, 0.25, 0.5, 1.0))
        params["architecture"] = rng.choice(ARCHITECTURES)
    else:
        params["search"] = f"model-0{rng.randrange(10)}"
    params["limit"] = 50
    return params


def per_core(cpu_ms: float) -> str:
    """Requests per second per core for ``cpu_ms`` of server CPU per request; a smoke run's few
    requests can fall within one clock tick of /proc's CPU accounting (0 ms)."""
    return f"{1000 / cpu_ms:.0f}" if cpu_ms > 0 else "(under one clock tick)"


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(
    settings: Settings, port: int, workers: int | None, log: Path
) -> subprocess.Popen[bytes]:
    """``certbench serve`` (API only, ``workers`` processes or its default) on 127.0.0.1."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CERTBENCH_")}
    env |= {"CERTBENCH_DATA_DIR": str(settings.data_dir), "CERTBENCH_DATABASE_URL":
            settings.database_url, "CERTBENCH_QUOTA_SUBMISSIONS_PER_DAY": "100000",
            "CERTBENCH_QUOTA_CONCURRENT": "100000"}  # fmt: skip
    if settings.broker_url:
        env["CERTBENCH_BROKER_URL"] = settings.broker_url
    command = [sys.executable, "-c", "from certbench.cli.app import main; main()", "serve",
               "--host", "127.0.0.1", "--port", str(port), "--no-worker",
               "--no-load-benchmarks", "--no-demo-references"]  # fmt: skip
    if workers is not None:
        command += ["--workers", str(workers)]
    handle = log.open("ab")
    process = subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"certbench serve exited with {process.returncode}; see {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=5).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    process.kill()
    raise SystemExit(f"server did not become ready; see {log}")


def server_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) used so far by ``pid`` and its direct children (the API
    processes of ``certbench serve``): a cost per request that a shared machine's load does not
    distort the way wall-clock throughput is distorted."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry.name) == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far (/proc/stat): how saturated the
    cores were during a run, client and database included."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    ticks = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - idle) / ticks, sum(fields) / ticks


def measure_reads(
    base: str, path: str, all_params: list[dict], clients: int, *, server: int
) -> tuple[float, list[float], float]:
    """(requests per second, latencies in ms, server CPU ms per request) of ``all_params`` sent
    by ``clients`` threads, each with its own keep-alive connection."""

    def one(client: httpx.Client, params: dict) -> float:
        start = time.perf_counter()
        try:
            response = client.get(f"{base}{path}", params=params)
        except (httpx.ReadError, httpx.RemoteProtocolError):
            # uvicorn closes a keep-alive connection idle for 5 s; on a loaded machine a
            # client can send on it as it closes: send once more on a fresh connection.
            response = client.get(f"{base}{path}", params=params)
        elapsed = (time.perf_counter() - start) * 1000
        response.raise_for_status()
        return elapsed

    pool_clients = [httpx.Client(timeout=120) for _ in range(clients)]
    try:
        for client in pool_clients:
            one(client, {})  # open the connection
        cpu = server_cpu_seconds(server)
        start = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            latencies = list(
                pool.map(
                    lambda ip: one(pool_clients[ip[0] % clients], ip[1]), enumerate(all_params)
                )
            )
        wall = time.perf_counter() - start
        cpu = server_cpu_seconds(server) - cpu
    finally:
        for client in pool_clients:
            client.close()
    return len(all_params) / wall, latencies, 1000 * cpu / len(all_params)


WRK_SCRIPT = """
paths = {%s}
i = 0
request = function()
  i = i %% #paths + 1
  return wrk.format("GET", paths[i])
end
"""
"""wrk's request generator: the same mix of leaderboard queries, in turn."""


def measure_wrk(
    base: str, path: str, all_params: list[dict], connections: int, seconds: int, *,
    server: int, folder: Path,
) -> tuple[float, float]:  # fmt: skip
    """(requests per second, server CPU ms per request) from ``wrk`` (a C client whose own CPU
    per request is a small fraction of the server's, unlike this process's Python threads, so
    the machine's cores go to the API processes): ``connections`` keep-alive connections on one
    wrk thread for ``seconds``."""
    paths = ", ".join(json.dumps(f"{path}?{urlencode(p)}") for p in all_params)
    script = folder / "mix.lua"
    script.write_text(WRK_SCRIPT % paths)
    cpu = server_cpu_seconds(server)
    run = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s", str(script), base],
        capture_output=True, text=True, check=True, timeout=seconds + 60,
    )  # fmt: skip
    cpu = server_cpu_seconds(server) - cpu
    rate = float(run.stdout.split("Requests/sec:")[1].split()[0])
    if "Non-2xx" in run.stdout or "Socket errors" in run.stdout:
        raise SystemExit(f"wrk saw failed requests:\n{run.stdout}")
    return rate, 1000 * cpu / (rate * seconds)


def measure_direct(settings: Settings, all_params: list[dict]) -> list[float]:
    """Reference: the same queries through the service function, no HTTP, same process."""
    latencies = []
    with session_scope(settings) as session:
        for params in all_params:
            query = LeaderboardQuery(**params)  # type: ignore[arg-type]
            start = time.perf_counter()
            leaderboard_service(session, BENCHMARK, query, viewer=None)
            latencies.append((time.perf_counter() - start) * 1000)
            session.expire_all()
    return latencies


def measure_intake(base: str, token: str, uploads: int, weights: bytes) -> tuple[float, list]:
    manifest = {
        "benchmark": BENCHMARK,
        "architecture": {"name": "cifar_resnet20", "kwargs": {}},
        "num_classes": 10,
        "preprocessing": {"mean": [0.4914, 0.4822, 0.4465], "std": [0.247, 0.2435, 0.2616]},
        "smoothing": {"sigma": 0.25},
        "metadata": {"name": "load-test", "authors": []},
    }
    bodies = []
    for i in range(uploads):  # distinct weights: change the last 4 bytes of tensor data
        bodies.append(weights[:-4] + i.to_bytes(4, "little"))
    latencies = []
    with httpx.Client(timeout=60, headers={"Authorization": f"Bearer {token}"}) as client:
        start = time.perf_counter()
        for body in bodies:
            t0 = time.perf_counter()
            response = client.post(
                f"{base}/api/v1/submissions",
                files={"weights": ("w.safetensors", body, "application/octet-stream"),
                       "manifest": ("m.json", json.dumps(manifest), "application/json")},
            )  # fmt: skip
            latencies.append((time.perf_counter() - t0) * 1000)
            if response.status_code != 202:
                raise SystemExit(f"upload failed: {response.status_code} {response.text}")
        wall = time.perf_counter() - start
    return uploads / wall, latencies


def resnet20_weights() -> bytes:
    import torch

    from certbench.nets import build_classifier, save_weights

    torch.manual_seed(0)
    model = build_classifier("cifar_resnet20", num_classes=10, mean=(0.5,) * 3, std=(0.25,) * 3)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "w.safetensors"
        save_weights(model, path)
        return path.read_bytes()


ENDPOINTS = {"leaderboard": f"/api/v1/leaderboards/{BENCHMARK}", "benchmarks": "/api/v1/benchmarks"}


def backend_settings(backend: str, args: argparse.Namespace, data_dir: Path) -> Settings:
    """Settings of a fresh database of ``backend`` (its PostgreSQL database created here)."""
    if backend == "sqlite":
        return Settings(data_dir=data_dir)
    database = f"certbench_load_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(args.postgres_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    return Settings(
        data_dir=data_dir,
        database_url=f"{args.postgres_url.rsplit('/', 1)[0]}/{database}",
        broker_url=args.redis_url,
    )


def drop_database(args: argparse.Namespace, settings: Settings) -> None:
    if not settings.database_url.startswith("postgresql"):
        return
    database = settings.database_url.rsplit("/", 1)[1]
    with psycopg.connect(args.postgres_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )


def run_backend(backend: str, args: argparse.Namespace, weights: bytes) -> dict[str, float]:
    rng = random.Random(args.seed)
    clients = [int(c) for c in args.clients.split(",")]
    row: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        data_dir = Path(folder)
        settings = backend_settings(backend, args, data_dir)
        try:
            migrations.upgrade(settings)
            t0 = time.perf_counter()
            token = seed(settings, args.entries, rng)
            with session_scope(settings) as session:  # the other packaged benchmarks too
                for definition in packaged_definitions():
                    if definition.name != BENCHMARK:
                        upsert_benchmark(session, definition)
            print(f"[{backend}] seeded {args.entries} entries in {time.perf_counter() - t0:.1f} s")
            params: dict[str, list[dict[str, object]]] = {
                "leaderboard": [read_params(rng, args.entries) for _ in range(args.reads)],
                "benchmarks": [{} for _ in range(args.reads)],
            }
            direct = measure_direct(settings, params["leaderboard"])
            row |= {"direct_p50": statistics.median(direct), "direct_p95": percentile(direct, 95)}
            for label, workers in (("1", 1), ("n", args.processes)):
                port = free_port()
                server = start_server(settings, port, workers, data_dir / f"serve-{port}.log")
                base = f"http://127.0.0.1:{port}"
                try:
                    # The first pass over the mix on a fresh process: no row of the board has
                    # been serialised yet, no paired test run (the memoised state is cold).
                    rate, latencies, cpu = measure_reads(
                        base, ENDPOINTS["leaderboard"], params["leaderboard"], 1, server=server.pid
                    )
                    row |= {f"{label}|cold|rate": rate, f"{label}|cold|cpu": cpu,
                            f"{label}|cold|p95": percentile(latencies, 95)}  # fmt: skip
                    # One connection reaches one process: warm every process (its snapshot
                    # and memos) over many connections before the measured runs.
                    for endpoint, path in ENDPOINTS.items():
                        measure_reads(base, path, params[endpoint], min(64, max(clients) * workers),
                                      server=server.pid)  # fmt: skip
                    for endpoint, path in ENDPOINTS.items():
                        for count in clients:
                            busy = machine_busy_seconds()
                            rate, latencies, cpu = measure_reads(
                                base, path, params[endpoint], count, server=server.pid
                            )
                            after = machine_busy_seconds()
                            key = f"{label}|{endpoint}|{count}"
                            row[f"{key}|busy"] = (after[0] - busy[0]) / (after[1] - busy[1])
                            row[f"{key}|rate"] = rate
                            row[f"{key}|p50"] = statistics.median(latencies)
                            row[f"{key}|p95"] = percentile(latencies, 95)
                            row[f"{key}|cpu"] = cpu
                    if args.wrk_seconds and shutil.which("wrk"):
                        rate, cpu = measure_wrk(
                            base, ENDPOINTS["leaderboard"], params["leaderboard"],
                            args.wrk_connections, args.wrk_seconds, server=server.pid,
                            folder=data_dir,
                        )  # fmt: skip
                        row |= {f"{label}|wrk|rate": rate, f"{label}|wrk|cpu": cpu}
                    if label == "n" and args.uploads:
                        intake_rate, intake = measure_intake(base, token, args.uploads, weights)
                        row |= {"intake_rate": intake_rate, "intake_p95": percentile(intake, 95)}
                finally:
                    server.terminate()
                    server.wait(timeout=60)
        finally:
            dispose_engines()
            drop_database(args, settings)
    report(backend, args, row, clients, len(weights))
    return row


def report(
    backend: str, args: argparse.Namespace, row: dict[str, float], clients: list[int], size: int
) -> None:
    """Per endpoint and client count: req/s, p50/p95 and server CPU per request of one API
    process and of ``--processes``, their throughput ratio (one process is the reference), and
    the leaderboard page's requests per core of server CPU."""
    n = args.processes
    print(f"[{backend}] {args.entries} entries, {args.reads} reads per run, CPUs here: "
          f"{len(os.sched_getaffinity(0))}")  # fmt: skip
    for endpoint in ENDPOINTS:
        for count in clients:
            one, many = (f"1|{endpoint}|{count}", f"n|{endpoint}|{count}")
            print(
                f"[{backend}] {endpoint:11s} {count:2d} client(s): 1 process "
                f"{row[one + '|rate']:6.1f} req/s (p50 {row[one + '|p50']:6.1f} ms, p95 "
                f"{row[one + '|p95']:6.1f} ms, server CPU {row[one + '|cpu']:5.1f} ms/req); "
                f"{n} processes {row[many + '|rate']:6.1f} req/s (p95 "
                f"{row[many + '|p95']:6.1f} ms, server CPU {row[many + '|cpu']:5.1f} ms/req); "
                f"ratio {n}:1 = "
                f"{row[many + '|rate'] / row[one + '|rate']:.2f} (machine CPU busy "
                f"{100 * row[one + '|busy']:.0f} % / {100 * row[many + '|busy']:.0f} %)"
            )
    cpu = row[f"1|leaderboard|{clients[0]}|cpu"]
    print(
        f"[{backend}] leaderboard page: {per_core(cpu)} req/s per core of server CPU "
        f"({cpu:.1f} ms/req), p50 {row[f'1|leaderboard|{clients[0]}|p50']:.1f} ms, p95 "
        f"{row[f'1|leaderboard|{clients[0]}|p95']:.1f} ms at {clients[0]} client(s), 1 process"
    )
    print(
        f"[{backend}] leaderboard page, first pass on a fresh process (cold memos): "
        f"{per_core(row['1|cold|cpu'])} req/s per core ({row['1|cold|cpu']:.1f} ms/req), "
        f"p95 {row['1|cold|p95']:.1f} ms at 1 client"
    )
    if "1|wrk|rate" in row:
        print(
            f"[{backend}] leaderboard via wrk ({args.wrk_connections} connections, "
            f"{args.wrk_seconds} s): 1 process {row['1|wrk|rate']:.0f} req/s (server CPU "
            f"{row['1|wrk|cpu']:.1f} ms/req), {n} processes {row['n|wrk|rate']:.0f} req/s "
            f"({row['n|wrk|cpu']:.1f} ms/req); ratio {n}:1 = "
            f"{row['n|wrk|rate'] / row['1|wrk|rate']:.2f}"
        )
    else:
        print(f"[{backend}] leaderboard via wrk: not measured (no `wrk` on PATH, or "
              "--wrk-seconds 0)")  # fmt: skip
    print(
        f"[{backend}] reference (leaderboard service function, no HTTP): p50 "
        f"{row['direct_p50']:.1f} ms, p95 {row['direct_p95']:.1f} ms"
    )
    if "intake_rate" in row:
        print(
            f"[{backend}] intake: {row['intake_rate']:.1f} uploads/s ({size / 1e6:.2f} MB "
            f"each), p95 {row['intake_p95']:.0f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes on SQLite (seconds): checks the script runs")  # fmt: skip
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--reads", type=int, default=300)
    parser.add_argument("--uploads", type=int, default=0, help="intake uploads (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--clients", default="1,8,32", help="concurrent client counts")
    parser.add_argument("--processes", type=int, default=2,
                        help="API processes compared with one")  # fmt: skip
    parser.add_argument("--postgres-url", default=POSTGRES_URL,
                        help="a PostgreSQL server (its database is only used to create and drop "
                        "a fresh one); default CERTBENCH_TEST_POSTGRES_URL")  # fmt: skip
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("CERTBENCH_TEST_REDIS_URL"),
        help="broker for intake with PostgreSQL (default: the embedded one)",
    )
    parser.add_argument(
        "--wrk-seconds",
        type=int,
        default=15,
        help="also load the page with wrk for this long (0: not; needs wrk)",
    )
    parser.add_argument("--wrk-connections", type=int, default=16)
    args = parser.parse_args()
    if args.smoke:
        args.entries, args.reads, args.uploads, args.clients = 60, 12, 0, "1,2"
        args.wrk_seconds = min(args.wrk_seconds, 2)
        if "--backends" not in sys.argv:
            args.backends = "sqlite"
    if not 0 < args.reads <= 5000 or not 0 <= args.uploads <= 500:
        raise SystemExit("keep --reads in 1..5000 and --uploads in 0..500 (bounded loops)")
    if not all(0 < int(c) <= 64 for c in args.clients.split(",")):
        raise SystemExit("keep each --clients count in 1..64")
    if not 0 <= args.wrk_seconds <= 600 or not 1 <= args.wrk_connections <= 256:
        raise SystemExit("keep --wrk-seconds in 0..600 and --wrk-connections in 1..256")
    if not 1 < args.processes <= 64 or args.entries < 1:
        raise SystemExit("keep --processes in 2..64 and --entries positive")
    weights = resnet20_weights() if args.uploads else b""
    for backend in args.backends.split(","):
        run_backend(backend, args, weights)


if __name__ == "__main__":
    main()
