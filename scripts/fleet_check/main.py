"""``scripts/fleet-check [--smoke] [--out DIR] [--cleanup] [--faults NAME,...]``.

Builds the fleet (``.topology``), starts its services (``.bringup``), runs an undisturbed run
(the baseline of each fault's delay; not in ``--smoke``), then one phase per fault
(``.faults``), reproduces every run here (``.reproduce``), checks the invariants
(``.checker``) and writes ``fleet-check.json`` and ``fleet-check.md`` under ``--out`` (default
``benchmarks/fleet/``). Everything is torn down
whatever happens (SIGINT, SIGTERM and SIGHUP included); ``--cleanup`` removes what an
interrupted run left (its owner process gone). Exit status: 0 every invariant held, 1 one broke,
2 the machine cannot host the fleet (the message says what is missing).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
from pathlib import Path
from types import FrameType

from scripts.fleet_check import netns, pace, topology

ROOT = Path(__file__).resolve().parents[2]
FULL_FAULTS = [
    "worker-partition",
    "worker-broker-partition",
    "worker-database-partition",
    "worker-netem",
    "api-netem",
    "api-database-partition",
    "postgres-restart",
    "redis-restart",
    "worker-kill-aggregate",
    "together",
]
SMOKE_FAULTS = ["partition-and-lossy"]


def missing_requirements() -> list[str]:
    """What this machine lacks to build a fleet (empty: nothing)."""
    from scripts.fleet_check.services import POSTGRES_BIN

    missing = []
    if os.geteuid() != 0:
        missing.append("root (network namespaces and TAP devices need it)")
    if shutil.which("ip") is None:
        missing.append("iproute2's `ip` (apt-get install iproute2)")
    elif os.geteuid() == 0:
        probe = f"cbfleet-probe-{os.getpid()}"
        made = netns.ip("netns", "add", probe, check=False)
        if made.returncode != 0:
            missing.append(f"`ip netns add` ({made.stderr.strip()})")
        else:
            netns.ip("netns", "del", probe, check=False)
    if not Path("/dev/net/tun").exists():
        missing.append("/dev/net/tun (TAP devices)")
    if not POSTGRES_BIN:
        missing.append(
            "PostgreSQL server binaries under /usr/lib/postgresql/*/bin "
            "(apt-get install postgresql)"
        )
    for program in ("redis-server", "setpriv"):
        if shutil.which(program) is None:
            missing.append(f"`{program}`")
    return missing


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="two workers, one API, one partition with lossy links (minutes)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "fleet")
    parser.add_argument(
        "--cleanup", action="store_true", help="remove what interrupted runs left behind, then exit"
    )
    parser.add_argument("--faults", default=None, help="comma-separated subset of the faults")
    parser.add_argument("--seed", type=int, default=1, help="seed of the switch's loss draws")
    parser.add_argument(
        "--small", action="store_true", help="every run on the smoke's 23-image benchmark (quicker)"
    )
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep the services' logs under OUT/logs"
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="stretch the shard time limits and the check's waits by this factor (at least 1) "
        "on a loaded or slow machine; the lease and the faults' timing are kept",
    )
    args = parser.parse_args(argv)
    try:
        pace.set_factor(args.time_scale)
    except ValueError as err:
        parser.error(str(err))
    missing = missing_requirements()
    if missing:
        print(
            "fleet-check: this machine cannot host the fleet; missing: " + "; ".join(missing),
            file=sys.stderr,
        )
        return 2
    if args.cleanup:
        removed = topology.cleanup()
        print(f"fleet-check: removed {len(removed)} leftover run(s) {removed}")
        return 0
    left = topology.cleanup()
    if left:
        print(f"fleet-check: removed leftovers of interrupted runs {left}", flush=True)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    names = args.faults.split(",") if args.faults else (SMOKE_FAULTS if args.smoke else FULL_FAULTS)
    from scripts.fleet_check.run import check

    report = check(
        smoke=args.smoke,
        faults=names,
        seed=args.seed,
        out=args.out,
        small=args.small or args.smoke,
        keep_logs=args.keep_logs,
    )
    return 0 if all(item["ok"] for item in report["invariants"]) else 1
