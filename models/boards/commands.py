"""``certbench results backfill-intervals``: intervals for entries aggregated before them.

Registered through the ``certbench.commands`` entry point (``models.boards.commands:register``)
as a sub-command of the ``certbench results`` group, which ``certbench.cli.client`` owns
(``certbench results ID`` shows a submission's results); imports nothing heavy until the command
runs, so ``certbench --help`` stays fast.
"""

from __future__ import annotations

from typing import Annotated

import typer

from certbench.cli import mount_results, results_app


def register(app: typer.Typer) -> None:
    """Entry point of the ``certbench.commands`` group."""
    mount_results(app)


@results_app.command("backfill-intervals")
def backfill_intervals(
    benchmark: Annotated[
        str | None, typer.Option(help="Only this benchmark's entries (default: every benchmark).")
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Recompute entries that already have their intervals.")
    ] = False,
) -> None:
    """Compute the 95 % intervals of every finished entry's figures (certification and every
    other stage with intervals: robustness, weather, Fourier sensitivity, Fourier lens), each
    test set's intervals and the per-image terms of paired tests from the stored per-image
    records (no model is run). Entries lacking any stage's bounds are filled; entries whose
    records are not on this server are listed and left unchanged."""
    from rich.progress import Progress

    from certbench.cli import console
    from certbench.errors import CertbenchError
    from models.boards.interval_backfill import (
        BackfillReport,
        backfill_entry,
        entries_to_backfill,
    )
    from models.core.settings import get_settings
    from models.db.engine import session_scope

    settings = get_settings()
    report = BackfillReport()
    try:
        with session_scope(settings) as session:
            ids = entries_to_backfill(session, benchmark=benchmark, force=force)
            with Progress(console=console, transient=True) as progress:
                task = progress.add_task("intervals", total=len(ids))
                for submission_id in ids:
                    reason = backfill_entry(session, submission_id, settings=settings)
                    if reason is None:
                        report.filled.append(submission_id)
                    else:
                        report.skipped[submission_id] = reason
                    progress.advance(task)
    except CertbenchError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from err
    console.print(f"intervals stored for {len(report.filled)} entr(y/ies)")
    for submission_id, reason in report.skipped.items():
        console.print(f"skipped submission {submission_id}: {reason}")
