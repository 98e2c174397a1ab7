"""The researcher's commands: ``certbench login``, ``logout``, ``submit``, ``status``,
``cancel``, ``results`` and ``leaderboard`` (and, from ``certbench.cli.zoo``, ``download``
and ``publish-weights``), talking to a certbench server over its REST API
(``certbench.client``).

Server: ``--server``, else CERTBENCH_SERVER, else the config file of ``certbench login``, else
http://127.0.0.1:8000. Token: ``--token``, else CERTBENCH_TOKEN, else the token the config file
holds *for that server*. Exit status: 0 done, 1 a run that failed, was rejected or cancelled,
2 a request the server refused or could not be made (the message says which and why).

Registered through the ``certbench.commands`` entry point ``client``. Only typer and the
standard library are imported here at module level: httpx, rich and the client load inside the
commands, so ``certbench --help`` stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from certbench.cli import exports as export_commands
from certbench.cli import zoo as zoo_commands
from certbench.cli.checks import POSITIVE
from certbench.cli.client_options import (
    EXIT_RUN_FAILED,
    AsJson,
    Server,
    SubmissionId,
    Token,
    client_errors,
    connect,
    consoles,
    echo_json,
)

if TYPE_CHECKING:
    from rich.console import Console

    from certbench.client import Client, Submission


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
    sub-commands to it, e.g. ``models.boards.commands``)."""
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
    app.command()(export_commands.export)
    mount_results(app)
    zoo_commands.register(app)


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
    from certbench.client import Client, config_path, load_config, resolve_server, save_config

    config = load_config(config_path())
    url = resolve_server(server, config=config)
    secret = (token or typer.prompt(f"API token for {url}", hide_input=True)).strip()
    with Client(url, secret) as client:
        me = client.me()
    config.server = url
    config.tokens[url] = secret
    path = save_config(config, config_path())
    _, errors = consoles()
    errors.print(
        f"logged in to {url} as {me.name} ({me.role}); token stored in {path}",
        highlight=False,
    )


@client_errors
def logout(server: Server = None) -> None:
    """Forget the stored token of a server (the token itself stays valid until revoked)."""
    from certbench.client import config_path, load_config, resolve_server, save_config

    config = load_config(config_path())
    url = resolve_server(server, config=config)
    removed = config.tokens.pop(url, None)
    if config.server == url:
        config.server = None
    save_config(config, config_path())
    _, errors = consoles()
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
    from certbench.cli.client_render import transfer_bar
    from certbench.client import refuse_swapped

    out, errors = consoles()
    from certbench.client import ClientError

    refuse_swapped(weights, manifest)  # before the progress bar: nothing is uploaded
    with connect(server, token, need_token=True) as client:
        # The token first (a bodiless GET): a server refuses a bad token before it reads an
        # upload, but an HTTP client sends the whole body before it reads the answer, so a
        # wrong token cost the whole upload (issue 34 §6).
        client.me()
        try:
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
        except ClientError as err:
            if err.code == "benchmark_mismatch":
                raise ClientError(f"{err}\n{benchmark_hint(manifest)}") from err
            raise
        _report_created(errors, created)
        if not wait:
            if as_json:
                echo_json(dict(created.raw))
            else:
                errors.print(f"follow it: certbench status {created.id}", highlight=False)
            return
        final = _follow(client, errors, created)
        _finish(client, out, errors, final, as_json=as_json)


def benchmark_hint(manifest: Path) -> str:
    """What to do about a benchmark_mismatch refusal: the manifest's benchmark must be the
    server's name of the benchmark the model's data belongs to (issue 25 §3)."""
    try:
        named = json.loads(manifest.read_text(encoding="utf-8")).get("benchmark")
    except (OSError, ValueError, AttributeError):
        named = None
    said = f"{manifest} names benchmark {named!r}" if named else f"{manifest} names no benchmark"
    return (
        f"Fix: {said}; it must be the server's name of the benchmark whose data the model was "
        'trained on (the demo data of `certbench datasets demo` belongs to "demo-digits", '
        'CIFAR-10 to "cifar10"): set "benchmark" in the manifest, or retrain with '
        "`certbench train ... --benchmark NAME`. The server's benchmarks: "
        "`certbench leaderboard NAME` or GET /api/v1/benchmarks."
    )


def _report_created(errors: Console, created: Submission) -> None:
    from certbench.cli.client_render import duration

    errors.print(
        f"submission {created.id}: {created.state}"
        + (f" — {created.message}" if created.message else ""),
        highlight=False,
    )
    estimate = created.estimate
    if estimate is not None and (estimate.forward_passes or estimate.seconds is not None):
        passes = f"{estimate.forward_passes:,} forward passes" if estimate.forward_passes else ""
        if passes and estimate.flops:
            passes += f" ({estimate.flops:.3g} FLOPs)"
        seconds = f"≈ {duration(estimate.seconds)}" if estimate.seconds is not None else ""
        errors.print(
            "estimated work: " + ", ".join(p for p in (passes, seconds) if p), highlight=False
        )


def _follow(client: Client, errors: Console, submission: Submission) -> Submission:
    """Poll to the end with a live progress bar; Ctrl-C stops following, not the run."""
    from certbench.cli.client_render import run_bar

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
    from certbench.cli.client_render import results_table, summary_table

    if final.unsuccessful:
        reason = f" ({final.reason})" if final.reason else ""
        errors.print(
            f"[bold red]submission {final.id} {final.state}{reason}:[/] {final.message}",
            highlight=False,
        )
        if as_json:
            echo_json(dict(final.raw))
        raise typer.Exit(EXIT_RUN_FAILED)
    source = final.duplicate_of if final.state == "duplicate" else final.id
    if source is None:  # a duplicate of an entry this user may not see
        errors.print(final.message, highlight=False)
        if as_json:
            echo_json(dict(final.raw))
        return
    results = client.results(source)
    if as_json:
        echo_json(dict(results.raw))
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
    from certbench.cli.client_render import status_table

    out, errors = consoles()
    with connect(server, token, need_token=True) as client:
        current = client.submission(submission_id)
        if wait:
            current = _follow(client, errors, current)
        if as_json:
            echo_json(dict(current.raw))
            return
        out.print(status_table(current, client.progress(submission_id)))
        if current.unsuccessful:
            raise typer.Exit(EXIT_RUN_FAILED)


@client_errors
def cancel(submission_id: SubmissionId, server: Server = None, token: Token = None) -> None:
    """Cancel a waiting or running submission of yours."""
    _, errors = consoles()
    with connect(server, token, need_token=True) as client:
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
    from certbench.cli.client_render import results_table, summary_table

    out, errors = consoles()
    with connect(server, token, need_token=False) as client:
        results = client.results(submission_id)
    if as_json:
        echo_json(dict(results.raw))
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
    sort: Annotated[
        str | None,
        typer.Option(
            help="Figure or column to sort by: its key (cert_acc_050) or the label the page "
            "shows (ACR, 'r = 0.5'), any case; the table's title says which was used."
        ),
    ] = None,
    order: Annotated[str | None, typer.Option(help="asc or desc.")] = None,
    limit: Annotated[int, typer.Option(help="Entries to show.", min=1, max=200)] = 20,
    offset: Annotated[int, typer.Option(help="Skip this many entries.", min=0)] = 0,
    sigma: Annotated[
        float | None, typer.Option(help="Only entries at this σ.", callback=POSITIVE)
    ] = None,
    search: Annotated[str | None, typer.Option(help="Model name contains.")] = None,
    server: Server = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """A benchmark's ranked entries (public ones; with a token, also your own private ones)."""
    from certbench.cli.client_render import leaderboard_table

    out, _ = consoles()
    with connect(server, token, need_token=False) as client:
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
        echo_json(dict(board.raw))
        return
    out.print(leaderboard_table(board))
