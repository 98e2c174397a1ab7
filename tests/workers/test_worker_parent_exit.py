"""A child worker (the control consumer, serve's embedded worker) stops when the process that
started it is gone, even when that process died while the child was still starting: the child
had been re-parented by the time it looked, and waited for a parent it no longer had (an
orphaned control consumer went on taking its stack's control queue for half an hour)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support import timing
from tests.support.processes import service_env


def test_a_worker_whose_parent_died_before_it_started_stops(tmp_path: Path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a launcher that is gone before its child looks at it
    env = service_env(CERTBENCH_DATA_DIR=str(tmp_path / "data"))  # embedded: no broker
    command = [
        sys.executable, "-c", "from certbench.cli.app import main; main()", "worker",
        "--queues", "certbench.control", "--no-control-consumer", "--exit-with-parent",
        "--parent-pid", str(gone.pid), "--embedded", "--loglevel", "info",
    ]  # fmt: skip
    # without --parent-pid it compared with its parent at start (pytest, alive) and never ended
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=timing.seconds(120)
    )
    output = done.stdout + done.stderr
    assert f"parent process {gone.pid} exited; stopping this worker" in output, output[-3000:]
