"""A worker a test started stops when the test process dies without its teardown.

Two suites beside ``certbench serve`` on a 23 GB machine: the kernel killed a pytest process for
memory, its end-to-end stack's worker went on consuming its Redis database, and the next suite
that claimed that database lost its messages to it (three submissions waited ten minutes for the
watchdog). ``tests.support.processes.start_worker`` now starts every worker with
``--exit-with-parent``; here a helper process starts one and is SIGKILLed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.e2e import redis_database
from tests.support.processes import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
HELPER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from tests.support.processes import service_env, start_worker

    folder, broker = Path(sys.argv[1]), sys.argv[2]
    env = service_env(
        CERTBENCH_DATA_DIR=str(folder),
        CERTBENCH_DATABASE_URL=f"sqlite:///{folder / 'certbench.db'}",
        CERTBENCH_BROKER_URL=broker,
    )
    worker = start_worker(env, folder / "worker.log")
    print(worker.pid, flush=True)
    sys.stdin.read()  # until killed: no teardown stops the worker
    """
)


def _gone(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_worker_outliving_its_killed_test_process_stops(tmp_path: Path):
    with redis_database() as broker:
        helper = subprocess.Popen(
            [sys.executable, "-c", HELPER, str(tmp_path), broker],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        worker = 0
        try:
            worker = int(helper.stdout.readline())
            log = tmp_path / "worker.log"
            wait_for(lambda: log.is_file() and " ready." in log.read_text(errors="replace"),
                     timeout=120, what="the helper's worker to be ready")  # fmt: skip
            helper.send_signal(signal.SIGKILL)  # what the kernel's OOM killer does
            helper.wait()
            wait_for(lambda: _gone(worker), timeout=120, what="the orphaned worker to stop")
            assert "exited; stopping this worker" in log.read_text(errors="replace")
        finally:
            helper.kill()
            if worker and not _gone(worker):
                os.kill(worker, signal.SIGKILL)
