"""The Celery application of the certbench workers.

Configuration is read lazily (``on_configure`` fires on first use of ``app.conf``), so importing
this module has no side effects beyond registering signal handlers; ``certbench worker`` and
``celery -A workers.app worker`` both end up with the settings of the environment they run in.

Each pool process (one per GPU worker) starts a watchdog thread when it starts. The forking
parent touches the database once, at start, to release the leases of its node's previous run,
and closes its connections before the pool forks.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from celery import Celery
from celery.signals import celeryd_init, worker_process_init, worker_process_shutdown

from models.core.settings import get_settings
from models.db.engine import dispose_engines, session_scope
from models.runs.reconcile import release_node
from workers.config import celery_config
from workers.watchdog import WatchdogThread

app = Celery("certbench", include=["workers.tasks"])
log = logging.getLogger(__name__)

_watchdog: list[WatchdogThread] = []


@app.on_configure.connect
def _configure(sender: Celery, **_: Any) -> None:
    sender.conf.update(celery_config(get_settings()))


#: What the first aggregation of a fresh worker would otherwise import while an entry waits.
#: Profiled (cProfile of ``aggregate`` in tests/workers/test_worker_control_first, busy 2-core
#: machine): scipy.stats (the intervals) about 1 s of a quiet core; later aggregates took
#: 0.05-0.5 s. Counting the network's FLOPs (torch.utils.flop_counter, which imports
#: torch._dynamo: 2.9-4.2 s of the first aggregate) is no longer done here: the aggregation reuses
#: the figure intake stored (``models.stages.certification.cost.network_figures``), which also
#: spares every worker start the 1.4 s of CPU its import took.
WARM_MODULES = ("scipy.stats", "pyarrow.parquet", "certbench.stats.intervals",
                "models.runs.results")  # fmt: skip


@celeryd_init.connect
def _warm_up(**_: Any) -> None:
    """Import what aggregation needs in the parent, before the pool forks (every pool process
    then has it), rather than in the first task that needs it."""
    for module in WARM_MODULES:
        importlib.import_module(module)


@celeryd_init.connect
def _release_own_leases(sender: str | None = None, **_: Any) -> None:
    """A starting worker ends the leases held under its node name (``release_node``): they
    belong to a process of this node that died (a crash, a kill -9, a power cut), so its pool's
    first watchdog sweep re-sends their shards at once rather than after the lease. Runs in the
    parent before the pool forks; its connections are closed so no child inherits them."""
    if not sender:
        return
    settings = get_settings()
    try:
        with session_scope(settings) as session:
            released = release_node(session, sender)
    finally:
        dispose_engines()
    if released:
        log.warning("released %s lease(s) of a previous run of worker %s", released, sender)


@worker_process_init.connect
def _start_watchdog(**_: Any) -> None:
    settings = get_settings()
    thread = WatchdogThread(app, settings, settings.watchdog_interval_seconds)
    thread.start()
    _watchdog.append(thread)


@worker_process_shutdown.connect
def _stop_watchdog(**_: Any) -> None:
    while _watchdog:
        _watchdog.pop().stop()
