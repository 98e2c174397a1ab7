"""``certbench datasets demo`` (entry point ``datasets``): write the offline demo data set.

Only typer at import time; the writer (numpy, scikit-learn, pyarrow) loads inside the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from certbench.cli import user_errors

datasets_app = typer.Typer(help="Local data sets.", no_args_is_help=True)


@datasets_app.command("demo")
@user_errors
def demo_command(
    out: Annotated[Path, typer.Option(help="Folder to write (Hub layout, train + test).")],
) -> None:
    """Write scikit-learn's handwritten digits as 32×32 RGB train/test splits (no network)."""
    from certbench.demo_data import write_demo_dataset

    result = write_demo_dataset(out)
    counts = ", ".join(f"{split} {count}" for split, count in result.counts.items())
    typer.echo(f"wrote {result.out}: {counts} images; content sha256 {result.sha256}")


def register(app: typer.Typer) -> None:
    """Entry point ``certbench.commands:datasets``."""
    app.add_typer(datasets_app, name="datasets")
