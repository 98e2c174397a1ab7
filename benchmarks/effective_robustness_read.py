"""Cost of effective robustness computed on read: a leaderboard page with and without its ER
column, and the aggregate analysis, on boards of N paired entries.

Seeds a fresh SQLite database (Alembic-migrated) in bulk: the packaged ``cifar10`` (clean) and
``cifar10-c`` benchmarks, N models at four σ with one finished entry on each (same weights and
model manifest, so every OOD entry has a clean partner) and 20 metric values per entry (what the
stages store). Then, in this process, times a 50-row page of ``cifar10-c``'s REST leaderboard
(the reference) against the same page with its ER column (``effective_robustness=True``): on a
first read (which fits every σ's aggregate trend over all N visible entries) and on a repeated
read (memoised until the boards change), and prints the ratios, so the figures are comparable
across machines.

    uv run python benchmarks/effective_robustness_read.py --entries 1000 10000 --repeats 5
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import insert

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import migrations
from api.services import analysis
from api.services import leaderboard_page as page_service
from models.boards.leaderboard import LeaderboardQuery
from models.catalog.benchmarks import packaged_definitions, upsert_benchmark
from models.core.settings import Settings
from models.db.base import utcnow
from models.db.engine import dispose_engines, session_scope
from models.db.entities import Artifact, LeaderboardEntry, MetricValue, Submission, User
from models.db.states import SubmissionState

KEYS = (
    "macr", "cert_acc_025", "cert_acc_050", "cert_acc_075", "cert_acc_100", "clean_accuracy",
    "abstain_rate", "pa_median", "pa_q10", "pa_q25", "pa_q75", "pa_q90", "band_low", "band_mid",
    "band_high", "base_accuracy", "linf_acc_8", "pd_acc_8", "hff_amplitude",
)  # fmt: skip
SIGMAS = (0.12, 0.25, 0.5, 1.0)


def seed(settings: Settings, entries: int, rng: random.Random) -> None:
    """N models, each with a finished entry on cifar10 and on cifar10-c."""
    with session_scope(settings) as session:
        wanted = {"cifar10", "cifar10-c"}
        benches = {
            d.name: upsert_benchmark(session, d) for d in packaged_definitions() if d.name in wanted
        }
        user = User(name="bench")
        session.add(user)
        session.commit()
        now = utcnow()
        artifacts, submissions, rows, values = [], [], [], []
        for model in range(entries):
            sigma = SIGMAS[model % len(SIGMAS)]
            clean = rng.uniform(0.3, 0.9)
            for k, (name, bench) in enumerate(benches.items()):
                sid = 2 * model + k + 1
                manifest = {
                    "benchmark": name,
                    "architecture": {"name": "cifar_resnet110", "kwargs": {}},
                    "num_classes": 10,
                    "preprocessing": {"mean": [0.49, 0.48, 0.45], "std": [0.25, 0.24, 0.26]},
                    "smoothing": {"sigma": sigma},
                    "metadata": {"name": f"model-{model}", "authors": []},
                    "input_size": [3, 32, 32],
                }
                artifacts.append({
                    "id": sid, "sha256": f"{model:064x}", "size_bytes": 1, "manifest": manifest,
                    "manifest_sha256": f"{sid:064x}", "weights_path": None, "created_at": now,
                })  # fmt: skip
                submissions.append({
                    "id": sid, "user_id": user.id, "benchmark_id": bench.id, "artifact_id": sid,
                    "state": SubmissionState.FINISHED, "model_name": f"model-{model}",
                    "architecture": "cifar_resnet110", "sigma": sigma,
                    "protocol_version": bench.protocol_version, "dedup_key": f"{sid:064x}",
                    "progress": 1.0, "created_at": now, "updated_at": now, "finished_at": now,
                })  # fmt: skip
                count = 500 * len(bench.test_sets)
                rows.append({
                    "submission_id": sid, "benchmark_id": bench.id, "test_sets": 1,
                    "protocol_version": bench.protocol_version, "count": count, "seconds": 1.0,
                    "finished_at": now,
                })  # fmt: skip
                accuracy = clean if k == 0 else clean * rng.uniform(0.5, 0.8)
                figures = {"cert_acc_000": round(accuracy * count) / count}
                figures.update({key: rng.random() for key in KEYS})
                values += [
                    {"submission_id": sid, "benchmark_id": bench.id, "stage": "x", "key": key,
                     "value": value}
                    for key, value in figures.items()
                ]  # fmt: skip
        for table, data in ((Artifact, artifacts), (Submission, submissions),
                            (LeaderboardEntry, rows), (MetricValue, values)):  # fmt: skip
            for start in range(0, len(data), 5000):
                session.execute(insert(table), data[start : start + 5000])
        session.commit()


def timed(settings: Settings, with_er: bool, repeats: int, *, cold: bool = False) -> list[float]:
    """Seconds per page; ``cold`` empties the ER memo first (the first read after a change)."""
    times = []
    for _ in range(repeats):
        if cold:
            analysis.clear_cache()
        with session_scope(settings) as session:
            start = time.perf_counter()
            page = page_service.leaderboard(
                session, "cifar10-c", LeaderboardQuery(limit=50), viewer=None,
                effective_robustness=with_er,
            )  # fmt: skip
            if with_er:
                assert all(r.effective_robustness is not None for r in page.rows)
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: checks that it runs (seconds)"
    )
    parser.add_argument("--entries", type=int, nargs="+", default=[1000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.smoke:
        args.entries, args.repeats = [30], 1
    print("| models (entries per board) | page, ms | page + ER, first read, ms | ratio | "
          "page + ER, repeated, ms | ratio |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|")
    for entries in args.entries:
        with tempfile.TemporaryDirectory() as folder:
            settings = Settings(data_dir=Path(folder), environment="test")
            migrations.upgrade(settings)
            seed(settings, entries, random.Random(0))
            timed(settings, True, 1)  # warm caches and imports
            plain = statistics.median(timed(settings, False, args.repeats))
            cold = statistics.median(timed(settings, True, args.repeats, cold=True))
            warm = statistics.median(timed(settings, True, args.repeats))
            with session_scope(settings) as session:
                result = analysis.analyse(session, "cifar10-c", viewer=None, scopes=("aggregate",),
                                          predictors=False)  # fmt: skip
            assert sum(len(g.entries) for g in result.groups) == entries
            print(f"| {entries:,} | {plain * 1e3:.0f} | {cold * 1e3:.0f} | {cold / plain:.1f}× | "
                  f"{warm * 1e3:.0f} | {warm / plain:.1f}× |")  # fmt: skip
            dispose_engines()


if __name__ == "__main__":
    main()
