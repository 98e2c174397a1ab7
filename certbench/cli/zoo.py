"""The model-zoo commands: ``certbench download ENTRY`` (published weights and manifest,
SHA-256 verified) and ``certbench publish-weights ID --license L`` (or ``--withdraw``).

Registered by ``certbench.cli.client.register``, with the options and error handling of
``certbench.cli.client_options``; imports only typer and the standard library at module level.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from certbench.cli.checks import DEFAULT_MODELS_DIR, output_folder
from certbench.cli.client_options import (
    Server,
    SubmissionId,
    Token,
    client_errors,
    connect,
    consoles,
)


def register(app: typer.Typer) -> None:
    """Add the model-zoo commands to ``app``."""
    app.command()(download)
    app.command("publish-weights")(publish_weights)


@client_errors
def download(
    entry: Annotated[int, typer.Argument(help="Entry (submission id).", min=1)],
    out: Annotated[
        Path,
        typer.Option(
            help="Folder to write the files into (created; not inside a Python package).",
            file_okay=False,
            callback=output_folder,
        ),
    ] = Path(DEFAULT_MODELS_DIR),
    benchmark: Annotated[
        str | None, typer.Option(help="Refuse unless the entry is on this benchmark.")
    ] = None,
    server: Server = None,
    token: Token = None,
) -> None:
    """Download an entry's published weights and manifest, verified by SHA-256
    (`<benchmark>-entry-<id>.safetensors` and `.json`). Load them in Python with
    certbench.client.zoo.load_model(benchmark, entry)."""
    from certbench.cli.client_render import transfer_bar
    from certbench.client import download as fetch

    stdout, errors = consoles()
    with (
        connect(server, token, need_token=False) as client,
        transfer_bar(errors, f"entry {entry}") as update,
    ):
        files = fetch(entry, benchmark=benchmark, out=out, client=client, on_progress=update)
    info = files.entry
    licence = info.license or "not published: only for you, the owner (or an admin)"
    stdout.print(f"weights  {files.weights}  (sha256 {info.sha256}, verified)", highlight=False)
    stdout.print(f"manifest {files.manifest}", highlight=False)
    stdout.print(f"licence  {licence}", highlight=False)
    stdout.print(
        f"load it: certbench.client.zoo.load_model({info.benchmark!r}, {entry})", highlight=False
    )


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

    _, errors = consoles()
    with connect(server, token, need_token=True) as client:
        if withdraw:
            updated = client.withdraw_weights(submission_id)
        elif license is None:
            raise ClientError(
                "--license is required to publish weights (e.g. --license CC-BY-4.0); "
                "--withdraw stops serving them"
            )
        else:
            updated = client.publish_weights(submission_id, license)
    from certbench.cli.client_render import weights_text

    errors.print(f"submission {updated.id}: weights {weights_text(updated)}", highlight=False)
