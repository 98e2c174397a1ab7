"""REST API load: throughput and latency at 1, 8 and 32 concurrent clients for the leaderboard
and the benchmark list with 10,000 entries, on SQLite and on PostgreSQL, and submission intake/s;
the client is this process, the server ``certbench serve`` (a subprocess on 127.0.0.1, loopback
only, bounded loops) with one API process and with the default number (the CPUs available).

    uv run python benchmarks/api_load.py --entries 10000 --reads 300 --uploads 40

The one-process server is the reference run in the same process: the table prints the
throughput ratio of the default server to it at each client count.

For each backend: a fresh database (SQLite file in a temp dir / a new PostgreSQL database on the
local server, dropped afterwards) migrated with Alembic and seeded in bulk with ``--entries``
finished submissions (users, artifacts with manifests, submissions, leaderboard entries: the
tables and columns the pipeline writes). Reads cycle through sort keys, orders, deep pages,
filters and search. The reference run in the same process is the same leaderboard query through
the service function without HTTP, so the ratio HTTP/direct shows what the web stack adds.
Intake posts distinct valid safetensors uploads (a cifar_resnet20, ~1 MB) through the full
path: size caps, manifest + safetensors checks, dedup, SHA-256, atomic file write, rows, and
the Celery message (embedded SQL broker with SQLite; Redis with PostgreSQL).
"""

from __future__ import annotations

import argparse
import json
import os
import random
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

import httpx
import psycopg
import redis
from psycopg import sql
from sqlalchemy import insert, text

import migrations
from api.services.leaderboards import leaderboard as leaderboard_service
from models.accounts import create_token, create_user
from models.base import utcnow
from models.catalog import packaged_definitions, upsert_benchmark
from models.db import dispose_engines, session_scope
from models.entities import Artifact, LeaderboardEntry, Role, Submission, User
from models.leaderboard import LeaderboardQuery
from models.settings import Settings
from models.states import SubmissionState

BENCHMARK = "cifar10"
POSTGRES_ADMIN_URL = os.environ.get(
    "CERTBENCH_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = "redis://127.0.0.1:6379/14"
SORTS = ("macr", "cert_acc_025", "cert_acc_050", "cert_acc_100", "abstain_rate", "pa_median",
         "sigma", "submitted", "model_name", "pd_acc_8", "linf_acc_16")  # fmt: skip
ARCHITECTURES = ("cifar_resnet20", "cifar_resnet56", "cifar_resnet110", "wrn")


ROBUSTNESS_COLUMNS = ("base_accuracy", "linf_acc_8", "linf_acc_16", "pd_acc_8", "pd_acc_16")


def robustness_columns(rng: random.Random, *, measured: bool) -> dict[str, float | None]:
    """Base-classifier figures (clean ≥ ℓ∞∩PD ≥ ℓ∞, 16/255 ≤ 8/255); None for a tenth of the
    entries, as for rows written before the robustness stage."""
    if not measured:
        return dict.fromkeys(ROBUSTNESS_COLUMNS)
    clean = rng.uniform(0.6, 0.95)
    pd8, pd16 = sorted((rng.uniform(0, clean) for _ in range(2)), reverse=True)
    return {"base_accuracy": clean, "pd_acc_8": pd8, "pd_acc_16": pd16,
            "linf_acc_8": pd8 * rng.random(), "linf_acc_16": pd16 * rng.random()}  # fmt: skip


def seed(settings: Settings, entries: int, rng: random.Random) -> str:
    """Bulk-insert ``entries`` finished, ranked submissions; returns an admin token."""
    with session_scope(settings) as session:
        definition = next(d for d in packaged_definitions() if d.name == BENCHMARK)
        benchmark = upsert_benchmark(session, definition)
        admin = create_user(session, name="bench-admin", role=Role.ADMIN)
        token = create_token(session, user=admin).secret
        users = [{"name": f"user{i:03d}", "role": Role.SUBMITTER} for i in range(100)]
        session.execute(insert(User), users)
        user_ids = [u.id for u in session.query(User).filter(User.name.like("user%"))]
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
            acc = [rng.random() for _ in range(5)]
            acc.sort(reverse=True)
            board.append(
                {"submission_id": sid, "benchmark_id": benchmark.id,
                 "protocol_version": benchmark.protocol_version, "macr": rng.random(),
                 "cert_acc_000": acc[0], "cert_acc_025": acc[1], "cert_acc_050": acc[2],
                 "cert_acc_075": acc[3], "cert_acc_100": acc[4], "clean_accuracy": acc[0],
                 "abstain_rate": rng.random() * 0.3, "pa_median": 0.5 + rng.random() / 2,
                 "band_low": None, "band_mid": None, "band_high": None, "test_sets": 1,
                 "count": 500, "seconds": 60.0, "finished_at": now,
                 **robustness_columns(rng, measured=i % 10 != 0)}
            )  # fmt: skip
        for table, rows in ((Artifact, artifacts), (Submission, submissions),
                            (LeaderboardEntry, board)):  # fmt: skip
            for start in range(0, len(rows), 2000):
                session.execute(insert(table), rows[start : start + 2000])
        session.commit()
        if settings.database_url.startswith("postgresql"):
            for table in ("artifacts", "submissions"):  # explicit ids: move the sequences on
                session.execute(
                    text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                         f"(SELECT max(id) FROM {table}))")
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
    command = [sys.executable, "-c", "from certbench.cli import main; main()", "serve",
               "--host", "127.0.0.1", "--port", str(port), "--no-worker",
               "--no-load-benchmarks"]  # fmt: skip
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


def measure_reads(
    base: str, path: str, all_params: list[dict], clients: int, *, server: int
) -> tuple[float, list[float], float]:
    """(requests per second, latencies in ms, server CPU ms per request) of ``all_params`` sent
    by ``clients`` threads, each with its own keep-alive connection."""

    def one(client: httpx.Client, params: dict) -> float:
        start = time.perf_counter()
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

    from certbench.architectures import build_classifier
    from certbench.loading import save_weights

    torch.manual_seed(0)
    model = build_classifier("cifar_resnet20", num_classes=10, mean=(0.5,) * 3, std=(0.25,) * 3)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "w.safetensors"
        save_weights(model, path)
        return path.read_bytes()


ENDPOINTS = {"leaderboard": f"/api/v1/leaderboards/{BENCHMARK}", "benchmarks": "/api/v1/benchmarks"}


def run_backend(backend: str, args: argparse.Namespace, weights: bytes) -> dict[str, float]:
    rng = random.Random(args.seed)
    clients = [int(c) for c in args.clients.split(",")]
    with tempfile.TemporaryDirectory() as folder:
        data_dir = Path(folder)
        database = None
        if backend == "postgresql":
            database = f"certbench_load_{uuid.uuid4().hex[:10]}"
            with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
            redis.Redis.from_url(REDIS_URL).flushdb()
            settings = Settings(
                data_dir=data_dir,
                database_url=f"{POSTGRES_ADMIN_URL.rsplit('/', 1)[0]}/{database}",
                broker_url=REDIS_URL,
            )
        else:
            settings = Settings(data_dir=data_dir)
        row: dict[str, float] = {}
        try:
            migrations.upgrade(settings)
            t0 = time.perf_counter()
            token = seed(settings, args.entries, rng)
            with session_scope(settings) as session:  # the other packaged benchmarks too
                for definition in packaged_definitions():
                    if definition.name != BENCHMARK:
                        upsert_benchmark(session, definition)
            print(f"[{backend}] seeded {args.entries} entries in {time.perf_counter() - t0:.1f} s")
            params = {
                "leaderboard": [read_params(rng, args.entries) for _ in range(args.reads)],
                "benchmarks": [{} for _ in range(args.reads)],
            }
            direct = measure_direct(settings, params["leaderboard"])
            row |= {"direct_p50": statistics.median(direct), "direct_p95": percentile(direct, 95)}
            for label, workers in (("1 process", 1), ("default", None)):
                port = free_port()
                server = start_server(settings, port, workers, data_dir / f"serve-{port}.log")
                base = f"http://127.0.0.1:{port}"
                try:
                    for endpoint, path in ENDPOINTS.items():
                        for count in clients:
                            rate, latencies, cpu = measure_reads(
                                base, path, params[endpoint], count, server=server.pid
                            )
                            key = f"{label}|{endpoint}|{count}"
                            row[f"{key}|rate"] = rate
                            row[f"{key}|p95"] = percentile(latencies, 95)
                            row[f"{key}|cpu"] = cpu
                    if workers is None:
                        intake_rate, intake = measure_intake(base, token, args.uploads, weights)
                        row |= {"intake_rate": intake_rate, "intake_p95": percentile(intake, 95)}
                finally:
                    server.terminate()
                    server.wait(timeout=60)
        finally:
            dispose_engines()
            if database is not None:
                with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
                    admin.execute(
                        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                            sql.Identifier(database)
                        )
                    )
                redis.Redis.from_url(REDIS_URL).flushdb()
    report(backend, row, clients, len(weights))
    return row


def report(backend: str, row: dict[str, float], clients: list[int], weights_size: int) -> None:
    """Requests/s and p95 per endpoint and client count; the default server's ratio to one
    API process (the reference run)."""
    print(f"[{backend}] API processes by default: {api_processes_default()}")
    for endpoint in ENDPOINTS:
        for count in clients:
            one = row[f"1 process|{endpoint}|{count}|rate"]
            default = row[f"default|{endpoint}|{count}|rate"]
            print(
                f"[{backend}] {endpoint:11s} {count:2d} client(s): 1 process {one:5.0f} req/s "
                f"(p95 {row[f'1 process|{endpoint}|{count}|p95']:6.1f} ms, server CPU "
                f"{row[f'1 process|{endpoint}|{count}|cpu']:5.1f} ms/req), default "
                f"{default:5.0f} req/s (p95 {row[f'default|{endpoint}|{count}|p95']:6.1f} ms, "
                f"CPU {row[f'default|{endpoint}|{count}|cpu']:5.1f} ms/req), "
                f"ratio {default / one:.2f}"
            )
    print(
        f"[{backend}] reference (leaderboard service function, no HTTP): p50 "
        f"{row['direct_p50']:.1f} ms, p95 {row['direct_p95']:.1f} ms\n"
        f"[{backend}] intake: {row['intake_rate']:.1f} uploads/s ({weights_size / 1e6:.2f} MB "
        f"each), p95 {row['intake_p95']:.0f} ms"
    )


def api_processes_default() -> int:
    from api.commands import api_processes

    return api_processes(Settings(), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--reads", type=int, default=300)
    parser.add_argument("--uploads", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--clients", default="1,8,32", help="concurrent client counts")
    args = parser.parse_args()
    if not 0 < args.reads <= 5000 or not 0 < args.uploads <= 500:
        raise SystemExit("keep --reads in 1..5000 and --uploads in 1..500 (bounded loops)")
    if not all(0 < int(c) <= 64 for c in args.clients.split(",")):
        raise SystemExit("keep each --clients count in 1..64")
    weights = resnet20_weights()
    for backend in args.backends.split(","):
        run_backend(backend, args, weights)


if __name__ == "__main__":
    main()
