"""The fleet's hosts and their wire: one network namespace per host on a private /24, joined by
the user-space switch (``scripts.fleet_check.switch``), and their removal even after a crash.

Every name is unique to a run: namespaces ``cbfleet-<run>-<host>`` and a work folder
``<tmp>/cbfleet/<run>`` holding the PostgreSQL and Redis data, the shared data directory, logs and
``owner.pid`` (the fleet-check process that built it). Nothing is bound on the machine's own
interfaces: the hosts have only their ``lo`` and the ``eth0`` of the switch, and no route beyond
10.231.0.0/24, so the machine's own PostgreSQL and Redis on 127.0.0.1 are never reached.
``cleanup`` removes what a run whose owner is gone left behind (``scripts/fleet-check --cleanup``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from scripts.fleet_check import netns

PREFIX = "cbfleet-"
SUBNET = "10.231.0"
ROOT = Path(tempfile.gettempdir()) / "cbfleet"


@dataclass(frozen=True)
class Host:
    name: str
    role: str
    address: str


def hosts(*, apis: int, workers: int) -> list[Host]:
    """The fleet: the database host (PostgreSQL and Redis), API hosts, worker hosts, a client."""
    return [
        Host("db", "database", f"{SUBNET}.10"),
        *[Host(f"api{k}", "api", f"{SUBNET}.{20 + k}") for k in range(1, apis + 1)],
        *[Host(f"w{k}", "worker", f"{SUBNET}.{30 + k}") for k in range(1, workers + 1)],
        Host("client", "client", f"{SUBNET}.40"),
    ]


@dataclass
class Fleet:
    """A built fleet: its run id, hosts, work folder and the switch process."""

    run: str
    hosts: list[Host]
    workdir: Path
    switch: subprocess.Popen[str] | None = None
    rules: dict[str, dict[str, object]] = field(default_factory=dict)

    def namespace(self, host: str) -> str:
        return f"{PREFIX}{self.run}-{host}"

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)

    def address(self, name: str) -> str:
        return self.host(name).address

    # --- the wire -----------------------------------------------------------------------------

    def command(self, request: dict[str, object]) -> dict[str, object]:
        """Send one rule to the switch; its JSON reply."""
        assert self.switch is not None and self.switch.stdin and self.switch.stdout
        self.switch.stdin.write(json.dumps(request) + "\n")
        self.switch.stdin.flush()
        line = self.switch.stdout.readline()
        if not line:
            raise RuntimeError(f"the switch exited ({self.switch.poll()}); see switch.log")
        reply: dict[str, object] = json.loads(line)
        if not reply.get("ok"):
            raise RuntimeError(f"switch refused {request}: {reply.get('error')}")
        return reply

    def block(self, rule: str, a: str, b: str | None = None, port: int | None = None) -> None:
        """Partition ``a`` from ``b`` (None: from every host), on ``port`` only when given."""
        self.command({"op": "block", "id": rule, "a": a, "b": b, "port": port})

    def impair(self, rule: str, host: str, **netem: float) -> None:
        """netem-style delay/jitter/loss/duplication/reordering on ``host``'s link."""
        self.command({"op": "impair", "id": rule, "host": host, **netem})

    def heal(self, rule: str) -> dict[str, object]:
        """Remove a rule; the frames it touched."""
        return self.command({"op": "heal", "id": rule})


def build(*, apis: int, workers: int, seed: int) -> Fleet:
    """Namespaces, the switch with a TAP ``eth0`` in each, addresses and loopbacks. What was
    built is removed again when any step fails or is interrupted."""
    ROOT.mkdir(parents=True, exist_ok=True)
    run = uuid.uuid4().hex[:6]
    workdir = ROOT / run
    workdir.mkdir()
    (workdir / "owner.pid").write_text(owner_mark())
    fleet = Fleet(run=run, hosts=hosts(apis=apis, workers=workers), workdir=workdir)
    try:
        _wire(fleet, seed)
    except BaseException:
        destroy(run, workdir, grace=1.0)
        raise
    return fleet


def _wire(fleet: Fleet, seed: int) -> None:
    workdir = fleet.workdir
    for host in fleet.hosts:
        netns.ip("netns", "add", fleet.namespace(host.name))
    pairs = [f"{fleet.namespace(h.name)}={h.name}" for h in fleet.hosts]
    log = (workdir / "switch.log").open("ab")
    fleet.switch = subprocess.Popen(
        [sys.executable, "-m", "scripts.fleet_check.switch", *pairs, "--seed", str(seed)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        start_new_session=True,
    )
    (workdir / "switch.pid").write_text(str(fleet.switch.pid))
    assert fleet.switch.stdout is not None
    ready = fleet.switch.stdout.readline()
    if not ready.startswith('{"ready"'):
        raise RuntimeError(f"the switch did not start: {(workdir / 'switch.log').read_text()}")
    for host in fleet.hosts:
        ns = fleet.namespace(host.name)
        netns.ip("-n", ns, "link", "set", "lo", "up")
        netns.ip("-n", ns, "addr", "add", f"{host.address}/24", "dev", "eth0")
        netns.ip("-n", ns, "link", "set", "eth0", "up")


def _kill_namespace_processes(namespace: str, grace: float) -> None:
    """SIGTERM every process in ``namespace``, SIGKILL what is left after ``grace`` s."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        pids = _others(namespace)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + wait
        while pids and _others(namespace) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not _others(namespace):
            return


def _others(namespace: str) -> list[int]:
    """The processes in ``namespace`` but this one (the orchestrator lives in the client's)."""
    return [pid for pid in netns.pids(namespace) if pid != os.getpid()]


def destroy(run: str, workdir: Path, *, grace: float = 5.0, keep: Path | None = None) -> None:
    """Processes in the run's namespaces, its switch, the namespaces, its work folder (the logs
    copied to ``keep`` first when given)."""
    prefix = f"{PREFIX}{run}-"
    for namespace in netns.existing(prefix):
        _kill_namespace_processes(namespace, grace)
    switch_pid = workdir / "switch.pid"
    if switch_pid.is_file():
        _kill_if_ours(int(switch_pid.read_text()), "scripts.fleet_check.switch")
    for namespace in netns.existing(prefix):
        netns.ip("netns", "del", namespace, check=False)
    if keep is not None and workdir.is_dir():
        keep.mkdir(parents=True, exist_ok=True)
        for log in workdir.glob("*.log"):
            shutil.copy2(log, keep / log.name)
    shutil.rmtree(workdir, ignore_errors=True)


def _kill_if_ours(pid: int, marker: str) -> None:
    """SIGKILL ``pid`` only if its command line names ``marker`` (a reused pid is left alone)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return
    if marker in cmdline:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return


def _started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, /proc/PID/stat's 22nd field), or
    None when there is no such process: with the pid it names one process, never a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def owner_mark() -> str:
    """What ``owner.pid`` holds for this process: its pid and start time."""
    return f"{os.getpid()} {_started(os.getpid())}"


def _alive(mark: str) -> bool:
    """Whether the process ``owner.pid`` names still runs (same pid, same start time)."""
    words = mark.split()
    if not words or not words[0].isdigit():
        return False
    started = _started(int(words[0]))
    return started is not None and (len(words) < 2 or started == words[1])


def cleanup() -> list[str]:
    """Remove every run whose owner process is gone: its processes, switch, namespaces and work
    folder. Runs of a fleet-check still running are left alone. Returns the run ids removed."""
    runs = {name[len(PREFIX) :].split("-", 1)[0] for name in netns.existing(PREFIX)}
    if ROOT.is_dir():
        runs |= {p.name for p in ROOT.iterdir() if p.is_dir()}
    removed = []
    for run in sorted(runs):
        owner = ROOT / run / "owner.pid"
        if owner.is_file() and _alive(owner.read_text()):
            continue
        destroy(run, ROOT / run, grace=2.0)
        removed.append(run)
    return removed
