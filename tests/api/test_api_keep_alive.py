"""``certbench serve`` keeps idle HTTP connections open ``CERTBENCH_KEEP_ALIVE_SECONDS`` (75 s),
longer than a load balancer's or client's idle timeout (issue 36). With uvicorn's 5 s a client
reusing a connection the server was closing got no answer at all: on a lossy link a response
took 5 s to arrive, the server's idle timer had run since it was written, and the next request
on that connection met the server's close (``scripts/fleet-check``, netem on an API host)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from models.core.settings import Settings


@pytest.mark.parametrize("configured", [None, 120])
def test_serve_keeps_idle_connections_longer_than_a_load_balancer(
    monkeypatch, tmp_path: Path, configured: int | None
):
    import uvicorn

    from api import commands

    ran: dict = {}
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: ran.update(kwargs))
    monkeypatch.setattr(commands, "prepare_service", lambda *args, **kwargs: None)
    extra = {} if configured is None else {"keep_alive_seconds": configured}
    settings = Settings(data_dir=tmp_path, environment="test", broker_url="redis://127.0.0.1:1/0",
                        **extra)  # fmt: skip
    monkeypatch.setattr(commands, "_settings", lambda: settings)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0}, raising=False)
    commands.serve(host=None, port=None, workers=None, worker=False, load_benchmarks=False,
                   demo_references=False)  # fmt: skip
    assert ran["timeout_keep_alive"] == (configured or 75)
    # longer than the idle timeouts in front of it: httpx 5 s, nginx and cloud balancers 60 s
    assert ran["timeout_keep_alive"] > 60
