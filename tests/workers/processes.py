"""Starting, watching and killing real service processes (workers, the API) from tests.

Each process gets its own session (process group), so ``kill_group`` takes down a Celery worker's
main process and its pool process together, like a machine losing power. Logs go to files that
failure messages quote, since a dead subprocess is otherwise silent.
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

T = TypeVar("T")

BIN = Path(sys.executable).parent
PYCACHE = Path(tempfile.gettempdir()) / "certbench-test-pycache"


def service_env(**values: str | None) -> dict[str, str]:
    """This environment minus every CERTBENCH_* variable, plus ``values`` (None = unset).

    One torch thread per process (the CI box has 2 shared cores), and byte-code caching in a temp
    folder so each new process does not recompile torch and celery from source.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("CERTBENCH_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(PYTHONPYCACHEPREFIX=str(PYCACHE), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
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
        self.process.wait(timeout=30)

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM to the main process (warm shutdown), SIGKILL the group if it lingers."""
        if self.alive():
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill_group()
        self._handle.close()


def start_worker(env: Mapping[str, str], log: Path, *extra: str) -> Service:
    """``certbench worker`` (the installed console script) with ``extra`` arguments."""
    return Service([str(BIN / "certbench"), "worker", "--loglevel", "info", *extra], env, log)


def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    services: tuple[Service, ...] = (),
    interval: float = 0.5,
) -> T:
    """Poll ``probe`` until it returns something truthy; fail with the services' logs otherwise."""
    deadline = time.monotonic() + timeout
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
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{logs}")
