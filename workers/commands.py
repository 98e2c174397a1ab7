"""``certbench worker``: one Celery worker process per GPU.

Registered through the ``certbench.commands`` entry point (``workers.commands:register``).
A worker is a Celery main process plus ONE pool process (prefork, concurrency 1): the pool process
owns the device and the database connections; the parent enforces the hard time limit and
re-queues the task if the pool process dies. Run one ``certbench worker`` per GPU
(``--device cuda:1`` or ``CUDA_VISIBLE_DEVICES=1``).

``--embedded`` is what ``certbench serve`` starts when no broker is configured: the same worker
over the embedded SQLite transport, exiting when its parent process goes away.

Control work never waits behind a shard (issue 34 §1). A worker that consumes the control queue
(validation, aggregation: seconds) also starts a *control consumer*: a second Celery node, in a
child process, that consumes only that queue. Without it a finished submission's ``aggregate``
waited in the control queue while the worker ran shards of later submissions: one prefetched
message at a time, taken from its queues in turn (kombu's fair cycle, Redis's round robin), so
with every stage's queue busy the control queue came round only after one shard of each. The
worker itself still consumes the control queue too, so control work goes on if the child dies
(it is started again). ``--no-control-consumer`` turns it off (e.g. a fleet that runs
``certbench worker --queues certbench.control`` on a machine of its own).

Only typer and the standard library are imported at module level: ``certbench --help`` loads
every command module, and Celery, pydantic and the stage registry would make it take seconds.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Annotated

import typer

from workers.errors import WorkerConfigError

if TYPE_CHECKING:
    from models.core.settings import Settings

log = logging.getLogger(__name__)

PARENT_POLL_SECONDS = 1.0
#: Seconds before a control consumer that died is started again, and how often at most.
CONTROL_RESTART_SECONDS = 5.0
CONTROL_MAX_RESTARTS = 5


def register(app: typer.Typer) -> None:
    """Entry point of the ``certbench.commands`` group."""
    app.command("worker")(worker)


def worker(
    embedded: Annotated[
        bool,
        typer.Option(
            "--embedded",
            help="Use the embedded SQLite transport (no broker server); requires "
            "CERTBENCH_BROKER_URL to be unset. Exits when the parent process exits.",
        ),
    ] = False,
    device: Annotated[
        str | None,
        typer.Option(help="Torch device for this worker (sets CERTBENCH_WORKER_DEVICE)."),
    ] = None,
    hostname: Annotated[
        str | None, typer.Option(help="Celery node name (default certbench-<device>@<host>).")
    ] = None,
    loglevel: Annotated[str, typer.Option(help="Celery log level.")] = "info",
    queues: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated queues to consume, e.g. 'certbench.robustness' for a worker "
            "that only runs the attacks; every queue needs some worker. Default: the control "
            "queue and every stage's queue.",
        ),
    ] = None,
    control_consumer: Annotated[
        bool,
        typer.Option(
            "--control-consumer/--no-control-consumer",
            help="When this worker consumes the control queue, also run a second node that "
            "consumes only it, so validation and aggregation never wait behind a shard.",
        ),
    ] = True,
    exit_with_parent: Annotated[
        bool, typer.Option("--exit-with-parent", hidden=True, help="Stop when the parent exits.")
    ] = False,
    parent_pid: Annotated[
        int | None,
        typer.Option(
            "--parent-pid",
            min=1,
            hidden=True,
            help="The process whose exit stops this worker (default: the parent at start).",
        ),
    ] = None,
) -> None:
    """Run a certification worker (validate, certify shards, aggregate) until stopped."""
    from celery.utils.nodenames import host_format
    from pydantic import ValidationError

    from models.core.queue import celery_config as broker_config
    from models.core.queue import ensure_embedded_queue
    from models.core.settings import get_settings
    from workers.config import check_timing
    from workers.names import CONTROL_QUEUE, QUEUES

    if queues is None:
        queues = ",".join(QUEUES)
    if device is not None:
        os.environ["CERTBENCH_WORKER_DEVICE"] = device
        get_settings.cache_clear()
    try:
        settings = get_settings()
    except ValidationError as err:
        typer.echo(f"error: invalid CERTBENCH_* settings: {err}", err=True)
        raise typer.Exit(2) from err
    try:
        consumed = _queues(queues)
        _check_mode(settings, embedded)
        check_timing(settings)
        _check_device(settings)
    except WorkerConfigError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    if embedded:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        ensure_embedded_queue(settings)
        quiet_root_warning()
    if embedded or exit_with_parent:
        _exit_with_parent(parent_pid or os.getppid())
    from workers.app import app as celery_app

    node = host_format(
        hostname or f"certbench-{(settings.worker_device or 'auto').replace(':', '')}@%h"
    )
    typer.echo(
        f"certbench worker {node}: broker {_redacted(broker_config(settings)['broker_url'])}",
        err=True,
    )
    control = None
    if control_consumer and CONTROL_QUEUE in consumed and consumed != [CONTROL_QUEUE]:
        control = ControlConsumer(control_node(node), embedded=embedded, loglevel=loglevel)
        control.start()
    celery_worker = celery_app.Worker(
        hostname=node,
        pool="prefork",
        concurrency=1,
        queues=consumed,
        loglevel=loglevel.upper(),
        without_mingle=True,
        without_gossip=True,
        without_heartbeat=True,
    )
    try:
        celery_worker.start()
    finally:
        if control is not None:
            control.stop()
    raise typer.Exit(celery_worker.exitcode or 0)


def control_node(node: str) -> str:
    """The control consumer's node name beside worker ``node`` (``name@host`` →
    ``name-control@host``): its own name, so a restart releases only its own leases."""
    name, at, host = node.partition("@")
    return f"{name}-control{at}{host}"


class ControlConsumer:
    """``certbench worker --queues <control queue>`` in a child process, kept running while
    this worker runs: started again (after CONTROL_RESTART_SECONDS, at most
    CONTROL_MAX_RESTARTS times) when it dies, stopped with this worker. The child stops by
    itself when this process is gone (``--exit-with-parent``), even after a SIGKILL."""

    def __init__(self, node: str, *, embedded: bool, loglevel: str) -> None:
        from models.core.queue import CONTROL_QUEUE

        self.command = [
            sys.executable, "-c", "from certbench.cli.app import main; main()", "worker",
            "--queues", CONTROL_QUEUE, "--no-control-consumer", "--exit-with-parent",
            "--parent-pid", str(os.getpid()), "--hostname", node, "--loglevel", loglevel,
            *(["--embedded"] if embedded else []),
        ]  # fmt: skip
        self.node = node
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the child and the thread that watches it."""
        self._spawn()
        threading.Thread(target=self._watch, name="control-consumer", daemon=True).start()

    def _spawn(self) -> None:
        with self._lock:
            if not self._stopping.is_set():
                self.process = subprocess.Popen(self.command, env=dict(os.environ))
                log.info("control consumer %s started (pid %s)", self.node, self.process.pid)

    def _watch(self) -> None:
        while not self._stopping.is_set():
            process = self.process
            if process is None:
                return
            code = process.wait()
            if self._stopping.is_set():
                return
            if self.restarts >= CONTROL_MAX_RESTARTS:
                log.error(
                    "control consumer %s exited with %s %s times; not started again: control "
                    "work now waits for this worker's running shard",
                    self.node, code, self.restarts + 1,
                )  # fmt: skip
                return
            self.restarts += 1
            log.warning("control consumer %s exited with %s; starting it again", self.node, code)
            if self._stopping.wait(CONTROL_RESTART_SECONDS):
                return
            self._spawn()

    def stop(self, timeout: float = 30.0) -> None:
        """Warm-stop the child (SIGTERM: it finishes a running task), kill it past ``timeout``."""
        self._stopping.set()
        with self._lock:
            process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


#: The start of Celery's warning for a worker run as root (``celery.platforms.ROOT_DISCOURAGED``).
ROOT_WARNING = r"You're running the worker with superuser privileges"


def quiet_root_warning() -> None:
    """Silence Celery's "running as root" SecurityWarning in the embedded worker only.

    ``certbench serve`` is the zero-configuration demo, often run as root in a container, and
    the warning (a page of text) is the first thing a newcomer sees. What it guards against does
    not apply here: the worker accepts JSON messages only (``workers.config``), so no pickle from
    the broker can run as root (Celery still refuses to start as root if pickle is ever
    accepted: that is an error, not this warning), and the embedded broker is a local SQLite file.
    A standalone ``certbench worker`` keeps the warning: on a deployment it is worth reading.
    """
    import warnings

    from celery.exceptions import SecurityWarning

    warnings.filterwarnings("ignore", message=ROOT_WARNING, category=SecurityWarning)


def _queues(option: str) -> list[str]:
    """The queues named in ``--queues``; unknown names are refused (a typo would idle)."""
    from workers.names import queues as known_queues

    names = [name.strip() for name in option.split(",") if name.strip()]
    known = known_queues()
    unknown = sorted(set(names) - set(known))
    if unknown or not names:
        raise WorkerConfigError(
            f"--queues {option!r}: unknown or no queue names {unknown}; choose from {list(known)}"
        )
    return names


def _check_mode(settings: Settings, embedded: bool) -> None:
    if embedded and settings.broker_url is not None:
        raise WorkerConfigError(
            f"--embedded uses the embedded SQLite transport but CERTBENCH_BROKER_URL="
            f"{_redacted(settings.broker_url)!r} is set; unset it, or drop --embedded to use it"
        )
    if not embedded and settings.broker_url is None:
        raise WorkerConfigError(
            "no broker configured: set CERTBENCH_BROKER_URL (e.g. redis://localhost:6379/0), or "
            "pass --embedded for the single-machine SQLite transport"
        )


def _check_device(settings: Settings) -> None:
    """Fail at start, not on the first task, when the configured device does not exist.

    ``torch.cuda.is_available`` does not create a CUDA context, so the pool process forked later
    can still use the GPU.
    """
    from workers.device import resolve_device

    device = resolve_device(settings.worker_device)
    log.info("certifying on %s", device)


def _redacted(url: str) -> str:
    """The broker URL without its password, for logs."""
    scheme, sep, rest = url.partition("://")
    if "@" not in rest:
        return url
    credentials, _, host = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}"


def _exit_with_parent(parent: int) -> None:
    """Warm-shut the worker down (SIGTERM to itself) once the launching process ``parent`` is
    gone. The launcher names itself (``--parent-pid``): a child whose parent died while it was
    still starting (a worker stopped at once, before its signal handlers were in place) has
    been re-parented by then, and comparing with its parent at start would wait forever (such
    an orphaned control consumer went on taking the control queue of its stack)."""

    def watch() -> None:
        while os.getppid() == parent:
            threading.Event().wait(PARENT_POLL_SECONDS)
        log.warning("parent process %s exited; stopping this worker", parent)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
