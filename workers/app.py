"""The Celery application of the certbench workers.

Configuration is read lazily (``on_configure`` fires on first use of ``app.conf``), so importing
this module has no side effects beyond registering signal handlers; ``certbench worker`` and
``celery -A workers.app worker`` both end up with the settings of the environment they run in.

Each pool process (one per GPU worker) starts a watchdog thread when it starts, so the database
is only ever touched from pool processes, never from the forking parent.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown

from models.settings import get_settings
from workers.config import celery_config
from workers.watchdog import WatchdogThread

app = Celery("certbench", include=["workers.tasks"])

_watchdog: list[WatchdogThread] = []


@app.on_configure.connect
def _configure(sender: Celery, **_: Any) -> None:
    sender.conf.update(celery_config(get_settings()))


@worker_process_init.connect
def _start_watchdog(**_: Any) -> None:
    settings = get_settings()
    thread = WatchdogThread(settings, settings.watchdog_interval_seconds)
    thread.start()
    _watchdog.append(thread)


@worker_process_shutdown.connect
def _stop_watchdog(**_: Any) -> None:
    while _watchdog:
        _watchdog.pop().stop()
