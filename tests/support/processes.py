"""Starting, watching and killing real service processes (workers, the API) from tests.

Each process gets its own session (process group), so ``kill_group`` takes down a Celery worker's
main process and its pool process together, like a machine losing power. Logs go to files that
failure messages quote, since a dead subprocess is otherwise silent. Every deadline here is
stretched by the machine's time scale (``tests.support.timing``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from tests.support import timing

T = TypeVar("T")

BIN = Path(sys.executable).parent
PYCACHE = Path(tempfile.gettempdir()) / "certbench-test-pycache"

#: A local port nobody listens on (9, "discard"): a proxy there refuses every connection at once.
CLOSED_PROXY = "http://127.0.0.1:9"
#: No network for the processes the tests start: the Hugging Face clients in offline mode, and
#: every HTTP(S) proxy variable, in both spellings that libraries read, at CLOSED_PROXY, so that a
#: request to any other host fails (and fails the test) instead of leaving the machine; the
#: local services (127.0.0.1, localhost) are reached directly. Raw sockets are not covered.
NO_NETWORK = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    **{
        name: value
        for key, value in {
            "HTTP_PROXY": CLOSED_PROXY,
            "HTTPS_PROXY": CLOSED_PROXY,
            "ALL_PROXY": CLOSED_PROXY,
            "NO_PROXY": "127.0.0.1,localhost",
        }.items()
        for name in (key, key.lower())
    },
}


def service_env(**values: str | None) -> dict[str, str]:
    """This environment minus every CERTBENCH_* variable, with NO_NETWORK, plus ``values``
    (None = unset).

    One torch thread per process (the CI box has 2 shared cores), and byte-code caching in a temp
    folder so each new process does not recompile torch and celery from source. The service never
    needs the network here, so any attempt to reach it is an error the test sees.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("CERTBENCH_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(PYTHONPYCACHEPREFIX=str(PYCACHE), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.update(NO_NETWORK)
    for key, value in values.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


class Service:
    """A started subprocess with its log file."""

    def __init__(
        self, args: list[str], env: Mapping[str, str], log: Path, *, cwd: Path | None = None
    ) -> None:
        self.args = args
        self.log = log
        self._handle = log.open("ab")
        self.process = subprocess.Popen(
            args,
            env=dict(env),
            stdout=self._handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=cwd,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def kill_group(self) -> None:
        """SIGKILL the whole process group (main process and pool children), then reap it."""
        if self.alive():
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=timing.seconds(30))

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM to the main process (warm shutdown), SIGKILL the group if it lingers past
        ``timeout`` (scaled)."""
        if self.alive():
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timing.seconds(timeout))
            except subprocess.TimeoutExpired:
                self.kill_group()
        self._handle.close()


def start_worker(
    env: Mapping[str, str], log: Path, *extra: str, control_consumer: bool = False
) -> Service:
    """``certbench worker`` (the installed console script) with ``extra`` arguments.

    Without its control consumer unless ``control_consumer``: that second node is a whole
    ``certbench worker`` process of its own (2.9 s of CPU to start, measured beside the worker's
    3.7 s on the 2-core reference machine), and only the tests of control-first work need it
    (``tests/workers/test_worker_control_first.py``, ``tests/e2e/test_e2e_control_first.py``);
    every other test's control messages are taken by the worker itself, as they are when the
    consumer has died. ``certbench serve``'s embedded worker keeps the default (it has one).

    The worker stops when this test process exits (``--exit-with-parent``): a pytest process
    killed by the kernel for memory (two suites beside ``certbench serve`` on a 23 GB machine)
    ran no teardown, its stack's worker went on consuming its Redis database, and the next
    suite that claimed that database lost its messages to it.
    """
    option = "--control-consumer" if control_consumer else "--no-control-consumer"
    orphan_guard = ("--exit-with-parent", "--parent-pid", str(os.getpid()))
    return Service(
        [str(BIN / "certbench"), "worker", "--loglevel", "info", option, *orphan_guard, *extra],
        env,
        log,
    )


def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    services: tuple[Service, ...] = (),
    interval: float = 0.5,
) -> T:
    """Poll ``probe`` until it returns something truthy; fail with the services' logs otherwise.

    ``timeout`` is the deadline on the reference machine; the wait lasts ``timing.seconds(timeout)``
    here.
    """
    limit = timing.seconds(timeout)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        for service in services:
            if not service.alive():
                raise AssertionError(
                    f"{service.args[1:3]} exited with {service.process.returncode} while waiting "
                    f"for {what}; log:\n{service.tail()}"
                )
        time.sleep(interval)
    logs = "\n\n".join(f"--- {s.args[1:3]} log:\n{s.tail()}" for s in services)
    raise AssertionError(
        f"timed out after {limit:.0f} s ({timeout} s scaled by the machine's time scale) "
        f"waiting for {what}\n{logs}"
    )
