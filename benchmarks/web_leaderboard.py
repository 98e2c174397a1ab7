"""Web leaderboard latency with 10,000 entries: HTML page vs the REST JSON of the same query.

Seeds a fresh SQLite database (migrated with Alembic) with N finished entries, serves the app with
uvicorn in a subprocess on 127.0.0.1 and requests pages from this process over loopback: the first
pages and deep pages, every sort column, filters and search. Prints p50/p95/max per kind and the
ratio of the HTML page to the REST API call answering the same query (the reference run in the same
process), so the figure is comparable across machines.

    uv run python benchmarks/web_leaderboard.py --entries 10000 --requests 400

Seeding writes rows in bulk with SQLAlchemy (the per-submission pipeline would take far longer
than the measurement and is exercised by the tests); the rows are the same tables and columns the
pipeline writes, including one artifact manifest per entry.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import httpx
from api_load import store_figures  # the same figures and read model as the REST benchmark
from sqlalchemy import insert

import migrations
from models.catalog.benchmarks import packaged_definitions, upsert_benchmark
from models.core.settings import Settings
from models.db.base import utcnow
from models.db.engine import dispose_engines, session_scope
from models.db.entities import Artifact, LeaderboardEntry, Submission, User
from models.db.states import SubmissionState

BENCHMARK = "cifar10-c"
ARCHITECTURES = ("cifar_resnet20", "cifar_resnet56", "cifar_resnet110", "wrn")
VENUES = ("ICML", "NeurIPS", "ICLR", "CVPR", None)
SORTS = (
    "macr",
    "pa_median",
    "cert_acc_025",
    "cert_acc_050",
    "cert_acc_100",
    "abstain_rate",
    "band_low",
    "band_high",
    "sigma",
    "submitted",
    "model_name",
    "pd_acc_8",
    "linf_acc_16",
)


def seed(settings: Settings, entries: int, rng: random.Random) -> None:
    """Bulk rows: one user, ``entries`` artifacts, finished submissions, leaderboard entries,
    their figures (``metric_values``) and the read model's rows."""
    with session_scope(settings) as session:
        definition = next(d for d in packaged_definitions() if d.name == BENCHMARK)
        bench = upsert_benchmark(session, definition)
        user = User(name="bench")
        session.add(user)
        session.commit()
        now = utcnow()
        artifacts, submissions, rows = [], [], []
        for i in range(1, entries + 1):
            sigma = rng.choice(bench.sigmas)
            name = f"model-{i:05d}-{rng.choice(['gauss', 'macer', 'smoothadv', 'consistency'])}"
            manifest = {
                "benchmark": BENCHMARK,
                "architecture": {"name": rng.choice(ARCHITECTURES), "kwargs": {}},
                "num_classes": 10,
                "preprocessing": {"mean": [0.49, 0.48, 0.45], "std": [0.25, 0.24, 0.26]},
                "smoothing": {"sigma": sigma},
                "metadata": {
                    "name": name,
                    "authors": [f"Author {i}"],
                    "licence": "MIT",
                    "paper_url": f"https://example.org/{i}",
                    "code_url": None,
                },
            }
            artifacts.append(
                {
                    "id": i,
                    "sha256": f"{i:064x}",
                    "size_bytes": 1000,
                    "manifest": manifest,
                    "manifest_sha256": f"{i:064x}",
                    "weights_path": None,
                    "created_at": now,
                }
            )
            submissions.append(
                {
                    "id": i,
                    "user_id": user.id,
                    "benchmark_id": bench.id,
                    "artifact_id": i,
                    "state": SubmissionState.FINISHED,
                    "model_name": name,
                    "architecture": manifest["architecture"]["name"],
                    "sigma": sigma,
                    "extra_data": rng.random() < 0.2,
                    "venue": rng.choice(VENUES),
                    "protocol_version": bench.protocol_version,
                    "dedup_key": f"{i:064x}",
                    "is_baseline": i % 500 == 0,
                    "flagged": i % 300 == 0,
                    "flag_reason": "check" if i % 300 == 0 else None,
                    "progress": 1.0,
                    "created_at": now - timedelta(minutes=i),
                    "updated_at": now,
                    "finished_at": now,
                }
            )
            rows.append(
                {
                    "submission_id": i,
                    "benchmark_id": bench.id,
                    "protocol_version": bench.protocol_version,
                    "test_sets": 75,
                    "count": 37500,
                    "seconds": 3600.0,
                    "finished_at": now,
                }
            )
        session.execute(insert(Artifact), artifacts)
        session.execute(insert(Submission), submissions)
        session.execute(insert(LeaderboardEntry), rows)
        store_figures(session, bench, [row["id"] for row in submissions], rng)
        session.commit()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = {**os.environ, "CERTBENCH_DATA_DIR": str(data_dir), "CERTBENCH_ENVIRONMENT": "test"}
    env.pop("CERTBENCH_DATABASE_URL", None)
    env.pop("CERTBENCH_BROKER_URL", None)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "api.main:create_app",
            "--factory",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"uvicorn exited with {process.returncode}")
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return process, base
        except httpx.TransportError:
            time.sleep(0.2)  # not listening yet
    process.kill()
    raise SystemExit("uvicorn did not start within 300 s")


def queries(rng: random.Random, entries: int, count: int) -> list[tuple[str, dict[str, str]]]:
    """(kind, web query) pairs: first pages, deep pages, sorts, filters, search."""
    out = []
    last_page = max(2, entries // 50)
    for _ in range(count):
        kind = rng.choice(("first page", "deep page", "sorted", "filtered", "search"))
        params: dict[str, str] = {}
        if kind == "deep page":
            params["page"] = str(rng.randint(2, last_page))
        elif kind == "sorted":
            params["sort"] = rng.choice(SORTS)
            params["order"] = rng.choice(("asc", "desc"))
            params["page"] = str(rng.randint(1, 20))
        elif kind == "filtered":
            params["sigma"] = rng.choice(("0.12", "0.25", "0.5", "1.0"))
            params["architecture"] = rng.choice(ARCHITECTURES)
            params["flagged"] = "exclude"
        elif kind == "search":
            params["search"] = rng.choice(("macer", "model-01", "smoothadv", "author"))
        out.append((kind, params))
    return out


def api_params(web: dict[str, str]) -> dict[str, str]:
    """The REST query answering the same question as a web query."""
    out = {
        k: v for k, v in web.items() if k in ("sort", "order", "sigma", "architecture", "search")
    }
    page = int(web.get("page", "1"))
    out["offset"], out["limit"] = str((page - 1) * 50), "50"
    if web.get("flagged") == "exclude":
        out["flagged"] = "false"
    return out


def timed(client: httpx.Client, url: str, params: dict[str, str]) -> float:
    start = time.perf_counter()
    response = client.get(url, params=params)
    elapsed = time.perf_counter() - start
    if response.status_code != 200:
        raise SystemExit(f"GET {url} {params} -> {response.status_code}: {response.text[:300]}")
    return elapsed * 1000


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[18] if len(values) >= 20 else max(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: checks that it runs (seconds)"
    )
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.smoke:
        args.entries, args.requests = 60, 10
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="certbench-web-bench-") as folder:
        data_dir = Path(folder) / "data"
        settings = Settings(data_dir=data_dir, environment="test")
        migrations.upgrade(settings)
        start = time.perf_counter()
        seed(settings, args.entries, rng)
        dispose_engines()
        print(f"seeded {args.entries} entries in {time.perf_counter() - start:.1f} s")
        process, base = serve(data_dir)
        try:
            with httpx.Client(base_url=base, timeout=30) as client:
                for _ in range(2 if args.smoke else 10):  # warm-up: imports, templates, cache
                    timed(client, f"/leaderboards/{BENCHMARK}", {})
                    timed(client, f"/api/v1/leaderboards/{BENCHMARK}", {})
                web: dict[str, list[float]] = {}
                api: dict[str, list[float]] = {}
                for kind, params in queries(rng, args.entries, args.requests):
                    web.setdefault(kind, []).append(
                        timed(client, f"/leaderboards/{BENCHMARK}", params)
                    )
                    api.setdefault(kind, []).append(
                        timed(client, f"/api/v1/leaderboards/{BENCHMARK}", api_params(params))
                    )
        finally:
            process.terminate()
            process.wait(timeout=10)
    load = os.getloadavg()[0]
    print(f"load average (1 min) at the end: {load:.1f} on {os.cpu_count()} CPUs")
    print(
        f"{'kind':<12} {'n':>4} {'HTML p50':>9} {'HTML p95':>9} {'HTML max':>9} "
        f"{'JSON p95':>9} {'HTML/JSON p95':>14}"
    )
    all_web, all_api = [], []
    for kind in sorted(web):
        w, a = web[kind], api[kind]
        all_web += w
        all_api += a
        print(
            f"{kind:<12} {len(w):>4} {statistics.median(w):>8.1f}ms {p95(w):>8.1f}ms "
            f"{max(w):>8.1f}ms {p95(a):>8.1f}ms {p95(w) / p95(a):>13.2f}x"
        )
    print(
        f"{'all':<12} {len(all_web):>4} {statistics.median(all_web):>8.1f}ms "
        f"{p95(all_web):>8.1f}ms {max(all_web):>8.1f}ms {p95(all_api):>8.1f}ms "
        f"{p95(all_web) / p95(all_api):>13.2f}x"
    )


if __name__ == "__main__":
    main()
