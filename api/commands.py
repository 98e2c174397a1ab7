"""``certbench serve``, ``certbench admin ...``, ``certbench benchmarks ...``, ``certbench db ...``.

Registered through the ``certbench.commands`` entry point (``api.commands:register``). ``serve``
migrates the database (``alembic upgrade head``, never ``create_all``), loads the packaged
benchmark definitions that are not in the database yet, writes the data sets the service
generates itself (the demo benchmark's), submits the packaged reference entries not submitted
yet, starts the embedded worker (``certbench worker --embedded``, a subprocess; api never imports
workers) when no broker is configured, then runs uvicorn.

Only typer, the standard library and light modules are imported at module level; SQLAlchemy,
Alembic and the settings are imported inside the commands that use them, so that
``certbench --help`` (which loads every command module) answers at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from certbench.errors import CertbenchError
from models.db.roles import Role

if TYPE_CHECKING:
    from models.core.settings import Settings

WORKER_STOP_SECONDS = 20
DEFAULT_MAX_API_WORKERS = 8
#: Seconds an API process may take to answer uvicorn's supervisor before it is killed and
#: replaced. uvicorn's default, 5 s, kills processes that are only slow: importing the app on a
#: loaded machine, or one request holding the interpreter for seconds; they were restarted in a
#: loop and the server never became ready (seen with 2 processes on a busy 2-core machine).
WORKER_HEALTHCHECK_SECONDS = 60

admin_app = typer.Typer(help="Manage users and API tokens.", no_args_is_help=True)
benchmarks_app = typer.Typer(help="Load, list and pin benchmark definitions.", no_args_is_help=True)
db_app = typer.Typer(help="Database migrations.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Entry point of the ``certbench.commands`` group."""
    app.command("serve")(serve)
    app.add_typer(admin_app, name="admin")
    app.add_typer(benchmarks_app, name="benchmarks")
    app.add_typer(db_app, name="db")


def _settings() -> Settings:
    from pydantic import ValidationError

    from models.core.settings import get_settings

    try:
        return get_settings()
    except ValidationError as err:
        typer.echo(f"error: invalid CERTBENCH_* settings: {err}", err=True)
        raise typer.Exit(2) from err


def _fail(err: CertbenchError) -> typer.Exit:
    typer.echo(f"error: {err}", err=True)
    return typer.Exit(1)


def load_packaged_benchmarks(settings: Settings) -> list[str]:
    """Load the packaged definitions missing from the database or stored at an older version
    (a release that adds a stage upgrades them); returns their names. A stored version at or
    above the packaged one (an admin's own edit) is left alone."""
    from sqlalchemy import select

    from models.catalog.benchmarks import packaged_definitions, upsert_benchmark
    from models.db.engine import session_scope
    from models.db.entities import Benchmark

    loaded = []
    with session_scope(settings) as session:
        stored = dict(session.execute(select(Benchmark.name, Benchmark.definition_version)).all())
        for definition in packaged_definitions():
            if stored.get(definition.name, 0) < definition.version:
                upsert_benchmark(session, definition)
                loaded.append(definition.name)
    return loaded


def prepare_service(
    settings: Settings, *, load_benchmarks: bool, demo_references: bool | None = None
) -> None:
    """What ``serve`` does once before any API process starts: migrate, remove partial uploads a
    killed process left behind, load the packaged benchmarks, write the generated data sets the
    benchmarks name, create the embedded broker's tables (kombu creates them lazily, which races
    between API processes), then submit the packaged reference entries not submitted yet
    (``demo_references``, default ``settings.demo_references``)."""
    import migrations
    from models.core.queue import prepare_embedded_broker
    from models.submissions.artifacts import remove_stale_partials

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    migrations.upgrade(settings)
    removed = remove_stale_partials(settings, older_than=settings.partial_upload_grace_seconds)
    if removed:
        typer.echo(f"removed {len(removed)} stale partial upload(s)", err=True)
    if load_benchmarks:
        loaded = load_packaged_benchmarks(settings)
        if loaded:
            typer.echo(f"loaded benchmarks: {', '.join(loaded)}", err=True)
    generate_datasets(settings)
    prepare_embedded_broker(settings)
    if settings.demo_references if demo_references is None else demo_references:
        submit_references(settings)


def generate_datasets(settings: Settings) -> list[str]:
    """Write the generated data sets (``models.benchmarks.generated``) that loaded benchmarks name
    and this machine lacks. A failure is reported, not fatal: the other benchmarks still serve,
    and workers try again when they need the data."""
    from models.benchmarks.generated import ensure_for_folders, folders_of
    from models.catalog.benchmarks import list_benchmarks
    from models.db.engine import session_scope

    with session_scope(settings) as session:
        folders = set().union(
            *(folders_of(b.test_sets, b.stages) for b in list_benchmarks(session))
        )
    try:
        written = ensure_for_folders(sorted(folders), settings)
    except CertbenchError as err:
        typer.echo(f"warning: could not write a generated data set: {err}", err=True)
        return []
    if written:
        typer.echo(f"generated data sets: {', '.join(written)}", err=True)
    return written


def submit_references(settings: Settings) -> None:
    """Queue the packaged reference entries missing from their benchmarks (once: see
    ``api.services.reference_entries``)."""
    from api.queue import JobQueue
    from api.services.reference_entries import submit_reference_entries

    queue = JobQueue(settings)
    try:
        outcomes = submit_reference_entries(settings, queue)
    finally:
        queue.close()
    made = [
        f"{o.benchmark}/{o.key} (#{o.submission_id})" for o in outcomes if o.status == "submitted"
    ]
    if made:
        typer.echo(f"submitted reference entries: {', '.join(made)}", err=True)
    for skipped in (o for o in outcomes if o.status == "skipped"):
        typer.echo(
            f"warning: reference {skipped.benchmark}/{skipped.key}: {skipped.message}", err=True
        )


def api_processes(settings: Settings, option: int | None) -> int:
    """API processes to run: ``--workers``, else CERTBENCH_API_WORKERS, else the CPUs this
    process may use, at most ``DEFAULT_MAX_API_WORKERS`` (each process holds its own copy of
    the libraries, a few hundred MB)."""
    if option is not None:
        return option
    if settings.api_workers is not None:
        return settings.api_workers
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, DEFAULT_MAX_API_WORKERS))


def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (CERTBENCH_HOST).")] = None,
    port: Annotated[
        int | None, typer.Option(help="Port (CERTBENCH_PORT).", min=1, max=65535)
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=1,
            help="API processes (CERTBENCH_API_WORKERS; default: the CPUs available, at most "
            f"{DEFAULT_MAX_API_WORKERS}).",
        ),
    ] = None,
    worker: Annotated[
        bool,
        typer.Option(
            "--worker/--no-worker",
            help="Start the embedded worker when no broker is configured.",
        ),
    ] = True,
    load_benchmarks: Annotated[
        bool,
        typer.Option(
            "--load-benchmarks/--no-load-benchmarks",
            help="Load packaged benchmark definitions missing from the database or older there.",
        ),
    ] = True,
    demo_references: Annotated[
        bool | None,
        typer.Option(
            "--demo-references/--no-demo-references",
            help="Submit the demo benchmark's packaged reference entries once "
            "(CERTBENCH_DEMO_REFERENCES, default on).",
        ),
    ] = None,
) -> None:
    """Run the leaderboard service: migrate, (embedded worker), the API on uvicorn processes.

    Several API processes share the port (uvicorn's supervisor restarts one that dies). SQLite
    (the default) serialises writers with a busy timeout and serves readers concurrently (WAL),
    so reads scale with processes while intake writes queue briefly; PostgreSQL needs nothing.
    """
    import uvicorn

    settings = _settings()
    try:
        prepare_service(settings, load_benchmarks=load_benchmarks, demo_references=demo_references)
    except CertbenchError as err:
        raise _fail(err) from err
    processes = api_processes(settings, workers)
    typer.echo(f"serving the API with {processes} process(es)", err=True)
    child = _start_embedded_worker() if worker and settings.embedded_broker else None
    _exit_on_sigterm()
    try:
        uvicorn.run(
            "api.main:create_app",
            factory=True,
            host=host or settings.host,
            port=port or settings.port,
            workers=processes,
            timeout_worker_healthcheck=WORKER_HEALTHCHECK_SECONDS,
            timeout_keep_alive=settings.keep_alive_seconds,
            log_level="info",
        )
    finally:
        if child is not None:
            _stop(child)


def _exit_on_sigterm() -> None:
    """End on SIGTERM (``docker stop``, systemd) as on Ctrl-C: through the ``finally`` that stops
    the embedded worker. uvicorn in one process (``--workers 1``, or a 1-CPU machine) restores
    the handler it found once it has shut down and raises the signal again; with the default
    handler the process died there, and the embedded worker went on alone until its task ended
    (found when a test's SIGTERM outlasted 60 s)."""

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, handler)


def _start_embedded_worker() -> subprocess.Popen[bytes]:
    """``certbench worker --embedded`` in a child process with the same environment."""
    command = [sys.executable, "-c", "from certbench.cli.app import main; main()", "worker"]
    typer.echo("starting the embedded worker (no CERTBENCH_BROKER_URL set)", err=True)
    return _start_group([*command, "--embedded", "--parent-pid", str(os.getpid())])


def _start_group(argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
    """``argv`` in a session (process group) of its own, which ``_stop`` can kill whole."""
    return subprocess.Popen(argv, env=dict(os.environ), start_new_session=True, **options)


def _stop(child: subprocess.Popen[bytes]) -> None:
    """Warm shutdown (SIGTERM), then kill the worker's whole process group if it does not exit
    in time.

    The worker runs in a session of its own so that the kill reaches its pool process and its
    control consumer too: killing its main process alone left them to finish their running
    tasks (minutes of a shard) after ``serve`` had exited, holding ``serve``'s output open. A
    Ctrl-C in the terminal reaches ``serve`` only, whose ``finally`` stops the worker here.
    """
    if child.poll() is not None:
        return
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=WORKER_STOP_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


# ---- admin --------------------------------------------------------------------------------------


@admin_app.command("create-user")
def create_user(
    name: Annotated[str, typer.Argument(help="User name (letters, digits, _ . -).")],
    role: Annotated[Role, typer.Option(help="submitter or admin.")] = Role.SUBMITTER,
    email: Annotated[str | None, typer.Option(help="Contact e-mail.")] = None,
    token: Annotated[bool, typer.Option("--token/--no-token", help="Also issue a token.")] = True,
) -> None:
    """Create a user (and print a new API token for it)."""
    from models.db import accounts
    from models.db.engine import session_scope

    settings = _settings()
    with session_scope(settings) as session:
        try:
            user = accounts.create_user(session, name=name, role=role, email=email)
        except CertbenchError as err:
            raise _fail(err) from err
        typer.echo(f"created {user.role} {user.name!r} (id {user.id})", err=True)
        if token:
            issued = accounts.create_token(session, user=user, label="cli")
            typer.echo(issued.secret)


@admin_app.command("create-token")
def create_token(
    name: Annotated[str, typer.Argument(help="Existing user name.")],
    label: Annotated[str, typer.Option(help="Label to tell tokens apart.")] = "cli",
    expires_in_days: Annotated[int | None, typer.Option(min=1, help="Expiry.")] = None,
) -> None:
    """Issue an API token for a user; prints the secret (shown only once)."""
    from models.db import accounts
    from models.db.base import utcnow
    from models.db.engine import session_scope

    settings = _settings()
    with session_scope(settings) as session:
        try:
            user = accounts.get_user(session, name=name)
        except CertbenchError as err:
            raise _fail(err) from err
        expires = utcnow() + timedelta(days=expires_in_days) if expires_in_days else None
        issued = accounts.create_token(session, user=user, label=label, expires_at=expires)
        typer.echo(f"token {issued.token.prefix}… (id {issued.token.id}) for {name!r}", err=True)
        typer.echo(issued.secret)


@admin_app.command("revoke-token")
def revoke_token(token_id: Annotated[int, typer.Argument(help="Token id.", min=1)]) -> None:
    """Revoke an API token."""
    from models.db import accounts
    from models.db.engine import session_scope

    settings = _settings()
    with session_scope(settings) as session:
        try:
            token = accounts.revoke_token(session, token_id=token_id)
        except CertbenchError as err:
            raise _fail(err) from err
        typer.echo(f"revoked token {token.prefix}… (id {token.id})")


@admin_app.command("list-users")
def list_users() -> None:
    """List users and their roles."""
    from models.db import accounts
    from models.db.engine import session_scope

    settings = _settings()
    with session_scope(settings) as session:
        for user in accounts.list_users(session):
            active = "active" if user.is_active else "inactive"
            typer.echo(f"{user.id}\t{user.name}\t{user.role}\t{active}")


# ---- benchmarks ---------------------------------------------------------------------------------


@benchmarks_app.command("load")
def load(
    files: Annotated[list[Path], typer.Argument(help="Definition files (JSON or YAML).")],
) -> None:
    """Create or update benchmarks from definition files (a changed file needs a new version)."""
    from models.catalog.benchmarks import load_definition, upsert_benchmark
    from models.db.engine import session_scope

    settings = _settings()
    try:
        definitions = [load_definition(path) for path in files]
        with session_scope(settings) as session:
            for definition in definitions:
                benchmark = upsert_benchmark(session, definition)
                typer.echo(
                    f"{benchmark.name} v{benchmark.definition_version}: "
                    f"{len(benchmark.test_sets)} test sets, protocol {benchmark.protocol_version}"
                )
    except CertbenchError as err:
        raise _fail(err) from err


@benchmarks_app.command("load-packaged")
def load_packaged() -> None:
    """Load the packaged definitions (CIFAR-10/100 clean, -C, -C̄, -F) missing or older here."""
    settings = _settings()
    try:
        loaded = load_packaged_benchmarks(settings)
    except CertbenchError as err:
        raise _fail(err) from err
    typer.echo(f"loaded: {', '.join(loaded) if loaded else 'nothing new'}")


@benchmarks_app.command("pin")
def pin(
    definition: Annotated[Path, typer.Argument(help="Definition file (JSON or YAML).")],
    data: Annotated[
        Path,
        typer.Option(
            help="Local copy of the published data: the folder `certbench publish` uploaded, or "
            "`hf download REPO --repo-type dataset --revision COMMIT --local-dir DIR`."
        ),
    ],
    hub_commit: Annotated[
        str | None,
        typer.Option(help="The Hub commit holding these bytes (40 hex; `publish` prints it)."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Write the pinned definition here (default: DEFINITION).")
    ] = None,
) -> None:
    """Pin each test set of DEFINITION to the bytes in DATA: writes provenance.sha256 (and
    hub_commit) per test set and bumps version; refuses when a config is missing."""
    from models.catalog.pins import pin_definition

    target = out or definition
    try:
        pinned = pin_definition(definition, data, hub_commit=hub_commit, out=target)
    except CertbenchError as err:
        raise _fail(err) from err
    target.write_text(pinned.text, encoding="utf-8")
    by = "sha256" + (f" and Hub commit {hub_commit}" if hub_commit else "")
    typer.echo(f"{target}: version {pinned.version}, {len(pinned.pins)} test set(s) pinned by {by}")
    if hub_commit is None:
        typer.echo(
            "note: without --hub-commit, workers verify only local copies of the data "
            "(`certbench datasets fetch REPO` or the definition's `folder`); a Hub-only source "
            "pinned by sha256 alone fails with dataset_mismatch"
        )


@benchmarks_app.command("list")
def list_all() -> None:
    """List benchmarks in the database."""
    from models.catalog.benchmarks import list_benchmarks
    from models.db.engine import session_scope

    settings = _settings()
    with session_scope(settings) as session:
        for b in list_benchmarks(session):
            typer.echo(
                f"{b.name}\tv{b.definition_version}\t{len(b.test_sets)} test sets\t"
                f"σ {b.sigmas}\t{b.protocol_version}"
            )


# ---- database -----------------------------------------------------------------------------------


@db_app.command("upgrade")
def upgrade(revision: Annotated[str, typer.Argument()] = "head") -> None:
    """Apply migrations up to REVISION (default head)."""
    import migrations

    settings = _settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    migrations.upgrade(settings, revision)
    typer.echo(f"database at {revision}")


@db_app.command("downgrade")
def downgrade(revision: Annotated[str, typer.Argument()]) -> None:
    """Revert migrations down to REVISION (``base`` empties the database)."""
    import migrations

    migrations.downgrade(_settings(), revision)
    typer.echo(f"database at {revision}")
