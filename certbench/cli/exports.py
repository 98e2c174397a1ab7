"""``certbench export``: what goes into a paper, from a certbench server.

LaTeX (booktabs) and CSV tables of a leaderboard page or of a comparison, with 95 % intervals
and "tied" marks, and BibTeX of the entries' and the benchmark's papers; the same text as the
pages' download links (``GET /api/v1/leaderboards/{benchmark}/export``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from certbench.cli.checks import POSITIVE
from certbench.cli.client_options import Server, Token, client_errors, connect, consoles


@client_errors
def export(
    benchmark: Annotated[str, typer.Argument(help="Benchmark name, e.g. cifar10.")],
    format: Annotated[str, typer.Option("--format", "-f", help="latex, csv or bibtex.")] = "latex",
    ids: Annotated[
        list[int] | None,
        typer.Option(
            "--id", help="Compare these entries (2 to 10) instead of a leaderboard page.", min=1
        ),
    ] = None,
    table: Annotated[str | None, typer.Option(help="With --id and CSV: entries or paired.")] = None,
    columns: Annotated[
        str | None,
        typer.Option(
            help="Columns, comma-separated, by key or the page's label (any case), e.g. "
            "'model,sigma,r = 0.5,ACR,p_A median'. Default: the papers' layout in LaTeX "
            "(model, σ, certified accuracy at each radius, ACR), every column in CSV."
        ),
    ] = None,
    sort: Annotated[
        str | None,
        typer.Option(
            help="Figure to rank by (leaderboard page): a key or the page's label, e.g. ACR."
        ),
    ] = None,
    order: Annotated[str | None, typer.Option(help="asc or desc.")] = None,
    limit: Annotated[int, typer.Option(help="Entries on the page.", min=1, max=200)] = 50,
    offset: Annotated[int, typer.Option(help="Skip this many entries.", min=0)] = 0,
    sigma: Annotated[
        float | None, typer.Option(help="Only entries at this σ.", callback=POSITIVE)
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write here instead of printing.")
    ] = None,
    server: Server = None,
    token: Token = None,
) -> None:
    """A leaderboard page or a comparison as a LaTeX or CSV table, or its BibTeX (CSV text that
    begins like a spreadsheet formula is prefixed with a single quote)."""
    if format not in ("latex", "csv", "bibtex"):
        raise typer.BadParameter(f"{format!r}: use latex, csv or bibtex", param_hint="--format")
    output, _ = consoles()
    with connect(server, token, need_token=False) as client:
        text = client.export(
            benchmark, fmt=format, ids=ids or None, table=table, sort=sort, order=order,
            limit=limit, offset=offset, sigma=sigma, columns=[columns] if columns else None,
        )  # fmt: skip
    if format == "csv":
        from certbench.figures import safe_csv

        text = safe_csv(text)  # whatever the server's version: no formula reaches a spreadsheet
    if out is None:
        typer.echo(text, nl=False)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    output.print(f"wrote {out}")
