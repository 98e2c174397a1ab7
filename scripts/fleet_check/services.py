"""The real processes of the fleet, each started inside its host's namespace (``ip netns exec``):
PostgreSQL (its own data directory, made by ``initdb``) and Redis (no persistence) on the
database host, ``certbench serve --no-worker`` on each API host, ``certbench worker`` on each
worker host. Logs go to ``<workdir>/<host>-<service>.log``.

Every certbench process reads one environment (:func:`service_env`), as a deployment's hosts
would; the data directory is one folder all hosts see (a deployment mounts it from shared
storage: the API writes uploads there, the workers records, the aggregate reads them back).
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from scripts.fleet_check import netns
from scripts.fleet_check.topology import Fleet

BIN = Path(sys.executable).parent
POSTGRES_BIN = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
DB_PORT, REDIS_PORT, API_PORT = 5432, 6379, 8000
DB_NAME = DB_USER = "certbench"


@dataclass(frozen=True)
class Timings:
    """The service settings that decide how faults play out, small enough for minutes-long
    checks and in the order the workers require (shard soft < hard limit < visibility timeout;
    heartbeat at most half the lease; reconcile after at least two heartbeats)."""

    shard_size: int = 8
    heartbeat: int = 2
    lease: int = 10
    watchdog: int = 2
    reconcile_after: int = 8
    soft_limit: int = 120
    hard_limit: int = 150
    visibility: int = 180

    def scaled(self, factor: float) -> Timings:
        """The shard limits and the visibility timeout stretched by ``factor`` (``pace``), in
        the order the workers require; the lease and heartbeat, against which the faults are
        staged, unchanged."""
        return replace(
            self,
            soft_limit=math.ceil(self.soft_limit * factor),
            hard_limit=math.ceil(self.hard_limit * factor),
            visibility=math.ceil(self.visibility * factor),
        )

    def env(self) -> dict[str, str]:
        return {
            "CERTBENCH_SHARD_SIZE": str(self.shard_size),
            "CERTBENCH_HEARTBEAT_SECONDS": str(self.heartbeat),
            "CERTBENCH_LEASE_SECONDS": str(self.lease),
            "CERTBENCH_WATCHDOG_INTERVAL_SECONDS": str(self.watchdog),
            "CERTBENCH_RECONCILE_AFTER_SECONDS": str(self.reconcile_after),
            "CERTBENCH_SHARD_SOFT_TIME_LIMIT_SECONDS": str(self.soft_limit),
            "CERTBENCH_SHARD_TIME_LIMIT_SECONDS": str(self.hard_limit),
            "CERTBENCH_VISIBILITY_TIMEOUT_SECONDS": str(self.visibility),
        }


def service_env(fleet: Fleet, timings: Timings) -> dict[str, str]:
    """The environment of every certbench process of the fleet."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CERTBENCH_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    db = fleet.address("db")
    env.update(
        {
            "CERTBENCH_ENVIRONMENT": "production",
            "CERTBENCH_DATABASE_URL": f"postgresql://{DB_USER}@{db}:{DB_PORT}/{DB_NAME}",
            "CERTBENCH_BROKER_URL": f"redis://{db}:{REDIS_PORT}/0",
            "CERTBENCH_DATA_DIR": str(fleet.workdir / "shared"),
            "CERTBENCH_WORKER_DEVICE": "cpu",
            "CERTBENCH_DEMO_REFERENCES": "false",
            "CERTBENCH_QUOTA_CONCURRENT": "100",
            "CERTBENCH_QUOTA_SUBMISSIONS_PER_DAY": "1000",
            "CERTBENCH_QUOTA_FAILED_PER_DAY": "1000",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "PYTHONPYCACHEPREFIX": os.environ.get("PYTHONPYCACHEPREFIX")
            or str(Path(tempfile.gettempdir()) / "certbench-test-pycache"),
            **timings.env(),
        }
    )
    return env


@dataclass
class Proc:
    """One started process (its own process group) in a host's namespace."""

    host: str
    name: str
    args: list[str]
    env: Mapping[str, str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self, fleet: Fleet) -> Proc:
        handle = self.log.open("ab")
        handle.write(f"\n=== start {time.strftime('%H:%M:%S')}: {' '.join(self.args)}\n".encode())
        handle.flush()
        self.popen = subprocess.Popen(
            ["ip", "netns", "exec", fleet.namespace(self.host), *self.args],
            env=dict(self.env),
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        handle.close()
        self.starts += 1
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal_group(self, sig: int) -> None:
        if self.alive():
            assert self.popen is not None
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                return

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the group (warm shutdown), SIGKILL it if it lingers past ``timeout``."""
        if not self.alive():
            return
        assert self.popen is not None
        self.signal_group(signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.signal_group(signal.SIGKILL)
            self.popen.wait(timeout=30)

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class Services:
    """Every process of the fleet, by host."""

    fleet: Fleet
    env: dict[str, str]
    procs: dict[str, Proc] = field(default_factory=dict)

    def proc(
        self, host: str, name: str, args: list[str], env: Mapping[str, str] | None = None
    ) -> Proc:
        log = self.fleet.workdir / f"{host}-{name}.log"
        proc = Proc(host, name, args, env if env is not None else self.env, log)
        self.procs[f"{host}/{name}"] = proc
        return proc

    # --- database host ------------------------------------------------------------------------

    @property
    def pgdata(self) -> Path:
        return self.fleet.workdir / "pgdata"

    def init_postgres(self) -> None:
        """``initdb`` a data directory owned by ``postgres`` (the server refuses root), trusting
        the fleet's /24 and listening on the database host's address only, with its socket in the
        data directory (never the machine's /var/run/postgresql)."""
        if not POSTGRES_BIN:
            raise RuntimeError("PostgreSQL server binaries not found under /usr/lib/postgresql")
        self.pgdata.mkdir()
        shutil.chown(self.pgdata, "postgres", "postgres")
        os.chmod(self.fleet.workdir, 0o755)
        subprocess.run(
            [
                "setpriv",
                "--reuid=postgres",
                "--regid=postgres",
                "--init-groups",
                str(POSTGRES_BIN[-1] / "initdb"),
                "-D",
                str(self.pgdata),
                "-U",
                DB_USER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        with (self.pgdata / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {self.fleet.address('db')}/24 trust\n")

    def postgres(self) -> Proc:
        address = self.fleet.address("db")
        args = [
            "setpriv",
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            str(POSTGRES_BIN[-1] / "postgres"),
            "-D",
            str(self.pgdata),
            "-c",
            f"listen_addresses={address}",
            "-c",
            f"port={DB_PORT}",
            "-c",
            f"unix_socket_directories={self.pgdata}",
            "-c",
            "max_connections=300",
            "-c",
            "shared_buffers=32MB",
            "-c",
            "log_min_messages=warning",
            "-c",
            "log_lock_waits=on",
        ]
        return self.procs.get("db/postgres") or self.proc("db", "postgres", args, os.environ)

    def postmaster_pid(self) -> int | None:
        pidfile = self.pgdata / "postmaster.pid"
        try:
            return int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def create_database(self) -> None:
        """The service's database (over the data directory's socket, as ``postgres``' tools)."""
        subprocess.run(
            [
                "setpriv",
                "--reuid=postgres",
                "--regid=postgres",
                "--init-groups",
                str(POSTGRES_BIN[-1] / "createdb"),
                "-h",
                str(self.pgdata),
                "-p",
                str(DB_PORT),
                "-U",
                DB_USER,
                DB_NAME,
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )

    def stop_postgres(self) -> None:
        """Fast shutdown: SIGINT to the postmaster (sessions are ended, then a checkpoint)."""
        pid = self.postmaster_pid()
        proc = self.procs["db/postgres"]
        if pid is not None:
            _signal(pid, signal.SIGINT)
        assert proc.popen is not None
        try:
            proc.popen.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.signal_group(signal.SIGKILL)
            proc.popen.wait(timeout=30)

    def redis(self) -> Proc:
        folder = self.fleet.workdir / "redis"
        folder.mkdir(exist_ok=True)
        args = [
            "redis-server",
            "--bind",
            self.fleet.address("db"),
            "--port",
            str(REDIS_PORT),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(folder),
            "--protected-mode",
            "no",
            "--daemonize",
            "no",
        ]
        return self.procs.get("db/redis") or self.proc("db", "redis", args, os.environ)

    # --- certbench ----------------------------------------------------------------------------

    def certbench(self, host: str, *args: str, timeout: float = 300) -> str:
        """Run a one-off ``certbench`` command on ``host``; its standard output."""
        run = subprocess.run(
            ["ip", "netns", "exec", self.fleet.namespace(host), str(BIN / "certbench"), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if run.returncode != 0:
            raise RuntimeError(f"certbench {' '.join(args)} on {host}: {run.stderr[-2000:]}")
        return run.stdout

    def api(self, host: str) -> Proc:
        args = [
            str(BIN / "certbench"),
            "serve",
            "--host",
            self.fleet.address(host),
            "--port",
            str(API_PORT),
            "--workers",
            "1",
            "--no-worker",
            "--no-load-benchmarks",
            "--no-demo-references",
        ]
        return self.procs.get(f"{host}/api") or self.proc(host, "api", args)

    def worker(self, host: str) -> Proc:
        args = [
            str(BIN / "certbench"),
            "worker",
            "--hostname",
            f"fleet-{host}@%h",
            "--loglevel",
            "info",
        ]
        return self.procs.get(f"{host}/worker") or self.proc(host, "worker", args)

    def kill_host(self, host: str) -> list[int]:
        """SIGKILL every process on ``host`` (a power cut); the pids killed."""
        pids = netns.pids(self.fleet.namespace(host))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        for proc in self.procs.values():
            if proc.host == host and proc.popen is not None:
                proc.popen.wait(timeout=30)
        return pids

    def freeze_host(self, host: str) -> list[int]:
        """SIGSTOP every process on ``host`` (to land a kill inside a step)."""
        pids = netns.pids(self.fleet.namespace(host))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                continue
        return pids

    def thaw_host(self, host: str) -> None:
        """SIGCONT every process on ``host``."""
        for pid in netns.pids(self.fleet.namespace(host)):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                continue

    def stop_all(self, grace: float = 10.0) -> None:
        """SIGTERM every certbench, Redis and PostgreSQL process at once, SIGKILL what is left
        after ``grace`` s (one wait for all, not one per process)."""
        live = [p for p in self.procs.values() if p.alive()]
        for proc in live:
            if proc.name == "postgres":
                pid = self.postmaster_pid()
                if pid is not None:
                    _signal(pid, signal.SIGINT)  # fast shutdown
            else:
                proc.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in live:
            assert proc.popen is not None
            try:
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.signal_group(signal.SIGKILL)
                proc.popen.wait(timeout=30)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
