"""What the client commands share: the --server/--token/--json options, how a command
connects (``certbench.client.config.resolve``), the consoles, and how errors end a command.

Only typer and the standard library at module level (see ``certbench.cli.client``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from certbench.client import Client

P = ParamSpec("P")
R = TypeVar("R")

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


def consoles() -> tuple[Console, Console]:
    """(stdout for results, stderr for progress and messages); plain when not a terminal
    (``certbench.cli.output``)."""
    from certbench.cli.output import make_console

    return make_console(), make_console(stderr=True, soft_wrap=True)


def client_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Show a refused or impossible request as one line on stderr and exit 2; Ctrl-C leaves a
    line saying the server keeps going."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        from certbench.client import AuthenticationFailed
        from certbench.errors import CertbenchError

        try:
            return command(*args, **kwargs)
        except AuthenticationFailed as err:
            _, errors = consoles()
            errors.print(f"[bold red]error:[/] {err}", highlight=False)
            errors.print(
                "Pass --token, set CERTBENCH_TOKEN, or run `certbench login --server URL "
                "--token TOKEN` (an admin creates tokens with `certbench admin create-token`).",
                highlight=False,
            )
            raise typer.Exit(EXIT_ERROR) from err
        except CertbenchError as err:
            _, errors = consoles()
            errors.print(f"[bold red]error:[/] {err}", highlight=False)
            raise typer.Exit(EXIT_ERROR) from err

    return wrapper


def connect(server: str | None, token: str | None, *, need_token: bool) -> Client:
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


def echo_json(document: Any) -> None:
    typer.echo(json.dumps(document, indent=2, ensure_ascii=False))
