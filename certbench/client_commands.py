"""The researcher's commands: ``certbench login``, ``submit``, ``status``, ``cancel``,
``results``, ``leaderboard``, ``download`` and ``publish-weights``, talking to a certbench
server over its REST API (``certbench.client``).

Server: ``--server``, else CERTBENCH_SERVER, else the config file of ``certbench login``, else
http://127.0.0.1:8000. Token: ``--token``, else CERTBENCH_TOKEN, else the token the config file
holds *for that server*. Exit status: 0 done, 1 a run that failed, was rejected or cancelled,
2 a request the server refused or could not be made (the message says which and why).

Registered through the ``certbench.commands`` entry point ``client``. Only typer and the
standard library are imported here at module level: httpx, rich and the client load inside the
commands, so ``certbench --help`` stays fast.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from typer.core import TyperGroup

if TYPE_CHECKING:
    from rich.console import Console

    from certbench.client import Client, Submission

F = TypeVar("F", bound=Callable[..., Any])

#: Exit status of a run that ended without results (failed, rejected, cancelled).
EXIT_RUN_FAILED = 1
#: Exit status of a refused or impossible request.
EXIT_ERROR = 2

Server = Annotated[
    str | None,
    typer.Option(
        "--server",
        help="Server URL (default: CERTBENCH_SERVER, else the one `certbench login` stored, "
        "else http://127.0.0.1:8000).",
        show_default=False,
    ),
]
Token = Annotated[
    str | None,
    typer.Option(
        "--token",
        help="API token (default: CERTBENCH_TOKEN, else the one `certbench login` stored for "
        "this server).",
        show_default=False,
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print the server's JSON instead.")]
SubmissionId = Annotated[int, typer.Argument(help="Submission id.", min=1, show_default=False)]


class _ResultsGroup(TyperGroup):
    """``certbench results ID`` runs ``certbench results show ID``; the group's other
    sub-commands (``backfill-intervals``) keep their names."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # typer's vendored click Context
        first = next((a for a in args if not a.startswith("-")), None)
        if first is not None and first not in self.commands and "--help" not in args:
            args = ["show", *args]
        return super().parse_args(ctx, args)


results_app = typer.Typer(
    cls=_ResultsGroup,
    help="Results of a submission (`certbench results ID [--json]`), and their maintenance.",
    no_args_is_help=True,
)


def mount_results(app: typer.Typer) -> typer.Typer:
    """The ``certbench results`` group, added to ``app`` once (other plug-ins add their
    sub-commands to it, e.g. ``models.results_commands``)."""
    if not any(group.typer_instance is results_app for group in app.registered_groups):
        app.add_typer(results_app, name="results")
    return results_app


def register(app: typer.Typer) -> None:
    """Entry point of the ``certbench.commands`` group."""
    app.command()(login)
    app.command()(logout)
    app.command()(submit)
    app.command()(status)
    app.command()(cancel)
    app.command()(leaderboard)
    app.command()(download)
    app.command("publish-weights")(publish_weights)
    mount_results(app)


# ---- plumbing ------------------------------------------------------------------------------


def _consoles() -> tuple[Console, Console]:
    """(stdout for results, stderr for progress and messages)."""
    from rich.console import Console

    return Console(), Console(stderr=True, soft_wrap=True)


def client_errors(command: F) -> F:
    """Show a refused or impossible request as one line on stderr and exit 2; Ctrl-C leaves a
    line saying the server keeps going."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from certbench.client import AuthenticationFailed
        from certbench.errors import CertbenchError

        try:
            return command(*args, **kwargs)
        except AuthenticationFailed as err:
            _, errors = _consoles()
            errors.print(f"[bold red]error:[/] {err}", highlight=False)
            errors.print(
                "Pass --token, set CERTBENCH_TOKEN, or run `certbench login --server URL "
                "--token TOKEN` (an admin creates tokens with `certbench admin create-token`).",
                highlight=False,
            )
            raise typer.Exit(EXIT_ERROR) from err
        except CertbenchError as err:
            _, errors = _consoles()
            errors.print(f"[bold red]error:[/] {err}", highlight=False)
            raise typer.Exit(EXIT_ERROR) from err

    return wrapper  # type: ignore[return-value]


def _connect(server: str | None, token: str | None, *, need_token: bool) -> Client:
    """A Client for the resolved server and token; refuses early when a token is needed and
    none was found."""
    from certbench.client import Client, ClientError, resolve

    found = resolve(server, token)
    if need_token and found.token is None:
        raise ClientError(
            f"no API token for {found.server}: pass --token, set CERTBENCH_TOKEN, or run "
            f"`certbench login --server {found.server} --token TOKEN`"
        )
    return Client(found.server, found.token)


def _echo_json(document: Any) -> None:
    typer.echo(json.dumps(document, indent=2, ensure_ascii=False))


# ---- account ---------------------------------------------------------------------------------


@client_errors
def login(
    server: Server = None,
    token: Annotated[
        str | None,
        typer.Option(help="API token (asked for, hidden, when omitted).", show_default=False),
    ] = None,
) -> None:
    """Check a token against a server and store both in the config file (mode 0600), so later
    commands need neither; the token is only ever sent to that server."""
    from certbench.client import Client
    from certbench.client.config import config_path, load_config, resolve_server, save_config

    config = load_config(config_path())
    url = resolve_server(server, config=config)
    secret = (token or typer.prompt(f"API token for {url}", hide_input=True)).strip()
    with Client(url, secret) as client:
        me = client.me()
    config.server = url
    config.tokens[url] = secret
    path = save_config(config, config_path())
    _, errors = _consoles()
    errors.print(
        f"logged in to {url} as {me.name} ({me.role}); token stored in {path}",
        highlight=False,
    )


@client_errors
def logout(server: Server = None) -> None:
    """Forget the stored token of a server (the token itself stays valid until revoked)."""
    from certbench.client.config import config_path, load_config, resolve_server, save_config

    config = load_config(config_path())
    url = resolve_server(server, config=config)
    removed = config.tokens.pop(url, None)
    if config.server == url:
        config.server = None
    save_config(config, config_path())
    _, errors = _consoles()
    what = "forgot the token" if removed else "no token was stored"
    errors.print(f"{what} for {url}", highlight=False)


# ---- submissions ---------------------------------------------------------------------------


@client_errors
def submit(
    weights: Annotated[
        Path, typer.Option(help="Model weights (.safetensors).", exists=True, dir_okay=False)
    ],
    manifest: Annotated[
        Path,
        typer.Option(
            help="JSON manifest (benchmark, architecture, σ, ...).", exists=True, dir_okay=False
        ),
    ],
    server: Server = None,
    token: Token = None,
    wait: Annotated[
        bool, typer.Option(help="Follow the run to its end and print its results.")
    ] = False,
    private: Annotated[bool, typer.Option(help="Visible only to you and admins.")] = False,
    extra_data: Annotated[
        bool, typer.Option(help="Trained with data beyond the base set.")
    ] = False,
    venue: Annotated[str | None, typer.Option(help="Where the model was published.")] = None,
    public_weights: Annotated[
        bool,
        typer.Option(help="Publish the weights in the model zoo once finished (needs --license)."),
    ] = False,
    license: Annotated[
        str | None, typer.Option(help="SPDX licence of published weights (e.g. CC-BY-4.0, MIT).")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Upload a model (with a progress bar); with --wait, follow the evaluation (progress, ETA)
    and print its results. Exits 1 when the run fails or is rejected, with the reason."""
    from certbench.client_render import transfer_bar

    out, errors = _consoles()
    with _connect(server, token, need_token=True) as client:
        with transfer_bar(errors, f"uploading {weights.name}") as update:
            created = client.submit(
                weights,
                manifest,
                private=private,
                extra_data=extra_data,
                venue=venue,
                weights_public=public_weights,
                weights_license=license,
                on_progress=update,
            )
        _report_created(errors, created)
        if not wait:
            if as_json:
                _echo_json(dict(created.raw))
            else:
                errors.print(f"follow it: certbench status {created.id}", highlight=False)
            return
        final = _follow(client, errors, created)
        _finish(client, out, errors, final, as_json=as_json)


def _report_created(errors: Console, created: Submission) -> None:
    from certbench.client_render import duration

    errors.print(
        f"submission {created.id}: {created.state}"
        + (f" — {created.message}" if created.message else ""),
        highlight=False,
    )
    estimate = created.estimate
    if estimate is not None and (estimate.forward_passes or estimate.seconds is not None):
        passes = f"{estimate.forward_passes:,} forward passes" if estimate.forward_passes else ""
        seconds = f"≈ {duration(estimate.seconds)}" if estimate.seconds is not None else ""
        errors.print(
            "estimated work: " + ", ".join(p for p in (passes, seconds) if p), highlight=False
        )


def _follow(client: Client, errors: Console, submission: Submission) -> Submission:
    """Poll to the end with a live progress bar; Ctrl-C stops following, not the run."""
    from certbench.client_render import run_bar

    if submission.terminal:
        return submission
    try:
        with run_bar(errors, submission) as update:
            return client.wait(submission.id, on_update=update)
    except KeyboardInterrupt:
        errors.print(
            f"stopped following; the run goes on: certbench status {submission.id}",
            highlight=False,
        )
        raise typer.Exit(130) from None


def _finish(
    client: Client, out: Console, errors: Console, final: Submission, *, as_json: bool
) -> None:
    """Results of a run that ended; exit 1 with the reason when it has none."""
    from certbench.client_render import results_table, summary_table

    if final.unsuccessful:
        reason = f" ({final.reason})" if final.reason else ""
        errors.print(
            f"[bold red]submission {final.id} {final.state}{reason}:[/] {final.message}",
            highlight=False,
        )
        if as_json:
            _echo_json(dict(final.raw))
        raise typer.Exit(EXIT_RUN_FAILED)
    source = final.duplicate_of if final.state == "duplicate" else final.id
    if source is None:  # a duplicate of an entry this user may not see
        errors.print(final.message, highlight=False)
        if as_json:
            _echo_json(dict(final.raw))
        return
    results = client.results(source)
    if as_json:
        _echo_json(dict(results.raw))
        return
    out.print(results_table(results))
    if results.summary is not None:
        out.print(summary_table(results.summary))


@client_errors
def status(
    submission_id: SubmissionId,
    server: Server = None,
    token: Token = None,
    wait: Annotated[bool, typer.Option(help="Follow the run to its end.")] = False,
    as_json: AsJson = False,
) -> None:
    """State, progress, ETA, throughput and estimated work of one of your submissions, with
    each test set's images done."""
    from certbench.client_render import status_table

    out, errors = _consoles()
    with _connect(server, token, need_token=True) as client:
        current = client.submission(submission_id)
        if wait:
            current = _follow(client, errors, current)
        if as_json:
            _echo_json(dict(current.raw))
            return
        out.print(status_table(current, client.progress(submission_id)))
        if current.unsuccessful:
            raise typer.Exit(EXIT_RUN_FAILED)


@client_errors
def cancel(submission_id: SubmissionId, server: Server = None, token: Token = None) -> None:
    """Cancel a waiting or running submission of yours."""
    _, errors = _consoles()
    with _connect(server, token, need_token=True) as client:
        cancelled = client.cancel(submission_id)
    errors.print(f"submission {cancelled.id}: {cancelled.state}", highlight=False)


@results_app.command("show")
@client_errors
def show_results(
    submission_id: SubmissionId,
    server: Server = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Results of a submission: each test set's ACR, certified accuracy and abstain rate, and
    the summary the leaderboard ranks by (public entries need no token)."""
    from certbench.client_render import results_table, summary_table

    out, errors = _consoles()
    with _connect(server, token, need_token=False) as client:
        results = client.results(submission_id)
    if as_json:
        _echo_json(dict(results.raw))
        return
    if not results.results:
        errors.print(
            f"submission {submission_id} is {results.state}: no results yet", highlight=False
        )
        return
    out.print(results_table(results))
    if results.summary is not None:
        out.print(summary_table(results.summary))
    if results.weights is not None:
        out.print(
            f"weights ({results.weights.license}): certbench download {submission_id}",
            highlight=False,
        )


@client_errors
def leaderboard(
    benchmark: Annotated[str, typer.Argument(help="Benchmark name, e.g. cifar10.")],
    sort: Annotated[str | None, typer.Option(help="Figure or column to sort by.")] = None,
    order: Annotated[str | None, typer.Option(help="asc or desc.")] = None,
    limit: Annotated[int, typer.Option(help="Entries to show.", min=1, max=200)] = 20,
    offset: Annotated[int, typer.Option(help="Skip this many entries.", min=0)] = 0,
    sigma: Annotated[float | None, typer.Option(help="Only entries at this σ.")] = None,
    search: Annotated[str | None, typer.Option(help="Model name contains.")] = None,
    server: Server = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """A benchmark's ranked entries (public ones; with a token, also your own private ones)."""
    from certbench.client_render import leaderboard_table

    out, _ = _consoles()
    with _connect(server, token, need_token=False) as client:
        board = client.leaderboard(
            benchmark,
            sort=sort,
            order=order,
            limit=limit,
            offset=offset,
            sigma=sigma,
            search=search,
        )
    if as_json:
        _echo_json(dict(board.raw))
        return
    out.print(leaderboard_table(board))


# ---- model zoo -----------------------------------------------------------------------------


@client_errors
def download(
    entry: Annotated[int, typer.Argument(help="Entry (submission id).", min=1)],
    out: Annotated[
        Path, typer.Option(help="Folder to write the files into.", file_okay=False)
    ] = Path(),
    benchmark: Annotated[
        str | None, typer.Option(help="Refuse unless the entry is on this benchmark.")
    ] = None,
    server: Server = None,
    token: Token = None,
) -> None:
    """Download an entry's published weights and manifest, verified by SHA-256
    (`<benchmark>-entry-<id>.safetensors` and `.json`). Load them in Python with
    certbench.zoo.load_model(benchmark, entry)."""
    from certbench.client_render import transfer_bar
    from certbench.zoo import download as fetch

    stdout, errors = _consoles()
    with (
        _connect(server, token, need_token=False) as client,
        transfer_bar(errors, f"entry {entry}") as update,
    ):
        files = fetch(entry, benchmark=benchmark, out=out, client=client, on_progress=update)
    info = files.entry
    licence = info.license or "not published: only for you, the owner (or an admin)"
    stdout.print(f"weights  {files.weights}  (sha256 {info.sha256}, verified)", highlight=False)
    stdout.print(f"manifest {files.manifest}", highlight=False)
    stdout.print(f"licence  {licence}", highlight=False)
    stdout.print(f"load it: certbench.zoo.load_model({info.benchmark!r}, {entry})", highlight=False)


@client_errors
def publish_weights(
    submission_id: SubmissionId,
    license: Annotated[
        str | None, typer.Option(help="SPDX licence to publish under, e.g. CC-BY-4.0 or MIT.")
    ] = None,
    withdraw: Annotated[bool, typer.Option(help="Stop serving the weights instead.")] = False,
    server: Server = None,
    token: Token = None,
) -> None:
    """Publish a submission's weights in the model zoo under a licence (anyone may download
    them once the entry has finished, if the entry is public), or withdraw them."""
    from certbench.client import ClientError

    _, errors = _consoles()
    with _connect(server, token, need_token=True) as client:
        if withdraw:
            updated = client.withdraw_weights(submission_id)
        elif license is None:
            raise ClientError(
                "--license is required to publish weights (e.g. --license CC-BY-4.0); "
                "--withdraw stops serving them"
            )
        else:
            updated = client.publish_weights(submission_id, license)
    from certbench.client_render import weights_text

    errors.print(f"submission {updated.id}: weights {weights_text(updated)}", highlight=False)
