"""Web leaderboard page with 10,000 entries beside the REST page of the same query (issue 35 §1):
pages per second per core of server CPU and p50/p95 at 1 client, on SQLite and PostgreSQL, with
the benchmark list (``GET /api/v1/benchmarks``) and the compare page measured in the same run.

    uv run python benchmarks/web_leaderboard.py                  # 10,000 entries, both databases
    uv run python benchmarks/web_leaderboard.py --smoke          # tiny sizes, both databases
    uv run python benchmarks/web_leaderboard.py --backends sqlite --entries 2000

Database, seed and server are ``benchmarks/api_load.py``'s: per backend a fresh database (a
SQLite file in a temp dir / a new database on the PostgreSQL server of ``--postgres-url``,
dropped afterwards) migrated with Alembic and seeded in bulk with ``--entries`` finished entries
of ``cifar10`` (5 % private, 1 % hidden, every figure and the read model's rows), then
``certbench serve --workers 1`` on 127.0.0.1 and this process as the one client, one request at a
time on one keep-alive connection. Per core is 1,000 / the server's CPU milliseconds per
request (user + system of the API process, from /proc), which a shared machine's load distorts
far less than wall-clock throughput; p50/p95 are wall-clock latencies at the client.

The mix: first pages, deep pages, every sort key in both orders, filters and search; each web
query has its REST twin (same sort, order, filters, offset and limit: the reference measured in
the same run, by the same loop). "Cold" is the first pass over the web mix on a fresh process,
before any row of the board is rendered; then each mix runs once to warm the process and once
measured. The compare page is measured on ``--compares`` pairs of public entries, first pass
(built) and second (kept).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from api_load import (  # the REST benchmark's database, seed, server and CPU accounting
    ARCHITECTURES,
    BENCHMARK,
    POSTGRES_URL,
    SORTS,
    backend_settings,
    drop_database,
    free_port,
    percentile,
    seed,
    server_cpu_seconds,
    start_server,
)
from sqlalchemy import select

import migrations
from models.catalog.benchmarks import packaged_definitions, upsert_benchmark
from models.core.settings import Settings
from models.db.engine import dispose_engines, session_scope
from models.db.entities import Submission

PAGE = 50
Request = tuple[str, dict[str, object]]


def web_queries(rng: random.Random, entries: int, count: int) -> list[tuple[str, dict[str, str]]]:
    """(kind, web query string) pairs: first pages, deep pages, sorts, filters, search."""
    out = []
    last_page = max(2, entries // PAGE)
    for _ in range(count):
        kind = rng.choice(("first page", "deep page", "sorted", "filtered", "search"))
        params: dict[str, str] = {}
        if kind == "deep page":
            params["page"] = str(rng.randint(2, last_page))
        elif kind == "sorted":
            params |= {"sort": rng.choice(SORTS), "order": rng.choice(("asc", "desc"))}
            params["page"] = str(rng.randint(1, min(20, last_page)))
        elif kind == "filtered":
            params["sigma"] = rng.choice(("0.12", "0.25", "0.5", "1.0"))
            params["architecture"] = rng.choice(ARCHITECTURES)
            params["flagged"] = "exclude"
        elif kind == "search":
            params["search"] = f"model-0{rng.randrange(10)}"
        out.append((kind, params))
    return out


def rest_twin(web: dict[str, str]) -> dict[str, object]:
    """The REST query answering the same question as a web query."""
    out: dict[str, object] = {
        k: v for k, v in web.items() if k in ("sort", "order", "sigma", "architecture", "search")
    }
    out["offset"] = (int(web.get("page", "1")) - 1) * PAGE
    out["limit"] = PAGE
    if web.get("flagged") == "exclude":
        out["flagged"] = "false"
    return out


def compare_pairs(settings: Settings, count: int, rng: random.Random) -> list[Request]:
    """``count`` compare pages of two public entries each."""
    with session_scope(settings) as session:
        public = list(
            session.scalars(
                select(Submission.id).where(Submission.is_private.is_(False), ~Submission.hidden)
            )
        )
    return [("/compare", {"id": rng.sample(public, 2)}) for _ in range(count)]


def run_pass(
    client: httpx.Client, requests: list[Request], server: int
) -> tuple[list[float], float]:
    """Latencies in ms of ``requests`` sent one after another, and the server's CPU ms per
    request over the pass. Any answer but 200 stops the run with the response."""
    latencies = []
    cpu = server_cpu_seconds(server)
    for path, params in requests:
        start = time.perf_counter()
        response = client.get(path, params=params)  # type: ignore[arg-type]
        latencies.append((time.perf_counter() - start) * 1000)
        if response.status_code != 200:
            raise SystemExit(
                f"GET {path} {params} -> {response.status_code}: {response.text[:500]}"
            )
    return latencies, 1000 * (server_cpu_seconds(server) - cpu) / len(requests)


def p95(latencies: list[float]) -> float:
    return percentile(latencies, 95) if len(latencies) > 1 else latencies[0]


def figures(latencies: list[float], cpu: float) -> dict[str, float]:
    return {"cpu": cpu, "p50": statistics.median(latencies), "p95": p95(latencies)}


def run_backend(backend: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Seed a fresh database of ``backend``, serve it, and measure every endpoint."""
    rng = random.Random(args.seed)
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        data_dir = Path(folder)
        settings = backend_settings(backend, args, data_dir)
        try:
            migrations.upgrade(settings)
            start = time.perf_counter()
            seed(settings, args.entries, rng)
            with session_scope(settings) as session:  # the benchmark list has them all
                for definition in packaged_definitions():
                    if definition.name != BENCHMARK:
                        upsert_benchmark(session, definition)
            print(
                f"[{backend}] seeded {args.entries} entries in {time.perf_counter() - start:.1f} s"
            )
            mix = web_queries(rng, args.entries, args.requests)
            web: list[Request] = [(f"/leaderboards/{BENCHMARK}", {**p}) for _, p in mix]
            rest: list[Request] = [
                (f"/api/v1/leaderboards/{BENCHMARK}", rest_twin(p)) for _, p in mix
            ]
            listing: list[Request] = [("/api/v1/benchmarks", {})] * args.requests
            compares = compare_pairs(settings, args.compares, rng)
            dispose_engines()
            port = free_port()
            server = start_server(settings, port, 1, data_dir / "serve.log")
            try:
                with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
                    client.get("/health")  # opens the connection
                    out["web cold"] = figures(*run_pass(client, web, server.pid))
                    if compares:
                        out["compare built"] = figures(*run_pass(client, compares, server.pid))
                        out["compare kept"] = figures(*run_pass(client, compares, server.pid))
                    for requests in (rest, listing):
                        run_pass(client, requests, server.pid)  # warm
                    by_kind: dict[str, list[float]] = {}
                    for name, requests in (("web", web), ("REST", rest), ("list", listing)):
                        latencies, cpu = run_pass(client, requests, server.pid)
                        out[name] = figures(latencies, cpu)
                        if name != "list":
                            for (kind, _), ms in zip(mix, latencies, strict=True):
                                by_kind.setdefault(f"{kind}|{name}", []).append(ms)
                    for key, values in by_kind.items():
                        out[f"kind|{key}"] = {"p95": p95(values), "n": len(values)}
            finally:
                server.terminate()
                server.wait(timeout=60)
        finally:
            dispose_engines()
            drop_database(args, settings)
    report(backend, args, out)
    return out


def report(backend: str, args: argparse.Namespace, out: dict[str, dict[str, float]]) -> None:
    """Per endpoint: pages per second per core of server CPU, p50/p95 at 1 client; the web
    page's cost over the REST page's of the same queries; p95 per kind of query."""
    load = os.getloadavg()[0]
    print(f"[{backend}] {args.entries} entries, {args.requests} requests per mix, 1 client, "
          f"1 API process; load average {load:.1f} on {os.cpu_count()} CPUs")  # fmt: skip
    labels = {
        "web": f"web page /leaderboards/{BENCHMARK}",
        "REST": f"REST /api/v1/leaderboards/{BENCHMARK}",
        "web cold": "web page, first pass (rows not yet rendered)",
        "list": "REST /api/v1/benchmarks",
        "compare built": f"web /compare, first pass ({args.compares} pairs)",
        "compare kept": "web /compare, second pass (kept)",
    }
    for key, label in labels.items():
        row = out.get(key)
        if row is None:
            print(f"[{backend}] {label:48s} not measured (--compares 0)")
            continue
        if row["cpu"] <= 0:  # a smoke run's few requests can fall within one clock tick
            print(f"[{backend}] {label:48s} server CPU under one clock tick, p50 "
                  f"{row['p50']:6.1f} ms, p95 {row['p95']:6.1f} ms")  # fmt: skip
            continue
        print(f"[{backend}] {label:48s} {1000 / row['cpu']:7.0f} pages/s per core "
              f"(server CPU {row['cpu']:6.2f} ms/request), p50 {row['p50']:6.1f} ms, "
              f"p95 {row['p95']:6.1f} ms")  # fmt: skip
    if out["REST"]["cpu"] > 0:
        print(f"[{backend}] web page / REST page, server CPU per request: "
              f"{out['web']['cpu'] / out['REST']['cpu']:.2f}x; p95: "
              f"{out['web']['p95'] / out['REST']['p95']:.2f}x")  # fmt: skip
    kinds = sorted({k.split("|")[1] for k in out if k.startswith("kind|")})
    print(f"[{backend}] p95 by kind: " + "; ".join(
        f"{kind} (n={out[f'kind|{kind}|web']['n']:.0f}) web {out[f'kind|{kind}|web']['p95']:.1f}"
        f" ms, REST {out[f'kind|{kind}|REST']['p95']:.1f} ms" for kind in kinds
    ))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes (seconds): checks the script runs")  # fmt: skip
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=300, help="requests per mix")
    parser.add_argument("--compares", type=int, default=40, help="compare pages per pass")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--postgres-url", default=POSTGRES_URL,
                        help="a PostgreSQL server (its database is only used to create and drop "
                        "a fresh one); default CERTBENCH_TEST_POSTGRES_URL")  # fmt: skip
    args = parser.parse_args()
    args.redis_url = None  # no intake here: the API never sends a task
    if args.smoke:
        args.entries, args.requests, args.compares = 60, 12, min(args.compares, 3)
    if not 0 < args.requests <= 5000 or not 0 <= args.compares <= 1000 or args.entries < 2:
        raise SystemExit("keep --requests in 1..5000, --compares in 0..1000, --entries >= 2")
    for backend in args.backends.split(","):
        if backend not in ("sqlite", "postgresql"):
            raise SystemExit(f"unknown backend {backend!r}: sqlite or postgresql")
        run_backend(backend, args)


if __name__ == "__main__":
    main()
