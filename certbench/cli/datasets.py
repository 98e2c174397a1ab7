"""``certbench datasets demo|fetch`` (entry point ``datasets``): local data sets.

``demo`` writes the offline demo data set; ``fetch`` downloads a Hub dataset into the local copy
the leaderboard service reads (``certbench.data.fetch``). Only typer at import time; the writer
(numpy, scikit-learn, pyarrow) and huggingface_hub load inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from certbench.cli.app import user_errors

datasets_app = typer.Typer(help="Local data sets.", no_args_is_help=True)


#: ``--folder``: the name the service resolves, shared by both commands.
FOLDER_HELP = (
    "Write into DATASETS_DIR/FOLDER instead: the `folder` a benchmark definition names "
    "(DATASETS_DIR: CERTBENCH_DATASETS_DIR, else $CERTBENCH_DATA_DIR/datasets)."
)


@datasets_app.command("demo")
@user_errors
def demo_command(
    out: Annotated[
        Path | None, typer.Option(help="Folder to write (Hub layout, train + test).")
    ] = None,
    folder: Annotated[str | None, typer.Option(help=FOLDER_HELP)] = None,
) -> None:
    """Write scikit-learn's handwritten digits as 32×32 RGB train/test splits (no network)."""
    from certbench.data import default_datasets_dir, definition_folder, write_demo_dataset

    if (out is None) == (folder is None):
        raise typer.BadParameter("give exactly one of --out and --folder")
    target = out if out is not None else definition_folder(str(folder), default_datasets_dir())
    result = write_demo_dataset(target)
    counts = ", ".join(f"{split} {count}" for split, count in result.counts.items())
    typer.echo(f"wrote {result.out}: {counts} images; content sha256 {result.sha256}")


@datasets_app.command("fetch")
@user_errors
def fetch_command(
    names: Annotated[
        list[str],
        typer.Argument(help="Hub dataset ids (org/name) or aliases (cifar10, cifar100)."),
    ],
    datasets_dir: Annotated[
        Path | None,
        typer.Option(
            help="The service's datasets dir (default: CERTBENCH_DATASETS_DIR, else "
            "$CERTBENCH_DATA_DIR/datasets, i.e. certbench-data/datasets)."
        ),
    ] = None,
    force: Annotated[bool, typer.Option(help="Download again over an existing copy.")] = False,
    folder: Annotated[str | None, typer.Option(help=FOLDER_HELP + " One dataset only.")] = None,
    revision: Annotated[
        str | None,
        typer.Option(
            help="Hub revision to download (default: the commit the packaged benchmarks pin for "
            "cifar10/cifar100, the default branch for other repos)."
        ),
    ] = None,
) -> None:
    """Download Hub datasets into DATASETS_DIR/<org>/<name>, where the leaderboard service reads
    them without network (needs network access here; shows a progress bar per file). Copies of
    cifar10/cifar100, new or already there, are checked against the pinned SHA-256."""
    from certbench.data import default_datasets_dir, fetch_dataset, hub_repo

    if folder is not None and len(names) != 1:
        raise typer.BadParameter("--folder takes one dataset; fetch the others separately")
    root = (datasets_dir or default_datasets_dir()).expanduser().resolve()
    repos = [hub_repo(name) for name in names]  # every name checked before any download
    for repo in repos:
        fetched = fetch_dataset(repo, root, force=force, revision=revision, folder=folder)
        state = "already there" if fetched.already_there else "downloaded"
        at = f"@{fetched.revision}" if fetched.revision else ""
        checked = (
            f" ({', '.join(fetched.verified)}: sha256 matches the pin)" if fetched.verified else ""
        )
        typer.echo(f"{fetched.repo}{at}: {state} at {fetched.path}{checked}")


def register(app: typer.Typer) -> None:
    """Entry point ``certbench.commands:datasets``."""
    app.add_typer(datasets_app, name="datasets")
