"""``certbench compare A B`` (entry point ``intervals``): paired tests of two entries.

Only typer at import time; numpy/scipy and the records reader are imported inside the command,
so registering it costs nothing for ``certbench --help``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from certbench.cli.app import console, user_errors
from certbench.cli.checks import LEVEL, NON_NEGATIVE, SIGNIFICANCE

Entry = Annotated[
    Path,
    typer.Argument(
        help="Records of one entry: a parquet file (one test set) or a folder of them "
        "(a benchmark; grouped by test set)."
    ),
]


@user_errors
def compare_command(
    a: Entry,
    b: Entry,
    radius: Annotated[
        list[float] | None,
        typer.Option(
            help="Radii for certified accuracy; repeat. Default 0, 0.25, 0.5, 0.75, 1.",
            callback=NON_NEGATIVE,
        ),
    ] = None,
    level: Annotated[
        float, typer.Option(help="Confidence level of the intervals.", callback=LEVEL)
    ] = 0.95,
    alpha: Annotated[
        float, typer.Option(help="Significance level of 'tied'.", callback=SIGNIFICANCE)
    ] = 0.05,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Paired comparison of two entries certified on the same images: ACR (or mACR) by paired
    bootstrap, certified accuracy at each radius by exact McNemar (one test set) or paired
    bootstrap (several); p-values, and 'tied' when a difference is not significant."""
    from certbench.smoothing import RADII
    from certbench.stats import compare_acr, compare_certified_accuracy

    entry_a, entry_b = _load(a), _load(b)
    tests = [compare_acr(entry_a, entry_b, level=level)]
    for r in radius or RADII:
        tests.append(compare_certified_accuracy(entry_a, entry_b, r, level=level))
    if as_json:
        rows = [{**t.to_dict(), "tied": not t.significant(alpha)} for t in tests]
        console.print_json(json.dumps({"a": str(a), "b": str(b), "alpha": alpha, "tests": rows}))
        return
    _print(tests, a, b, level, alpha)


def _load(path: Path) -> Any:
    from certbench.smoothing import read_benchmark_records, read_records

    return read_benchmark_records(path) if path.is_dir() else read_records(path)


def _print(tests: list[Any], a: Path, b: Path, level: float, alpha: float) -> None:
    from rich.table import Table

    table = Table(title=f"A = {a}   B = {b}", show_header=True)
    for name in ("metric", "A", "B", f"A − B [{level:.0%} interval]", "p-value", "verdict"):
        table.add_column(name, justify="left" if name == "metric" else "right")
    for t in tests:
        d = t.difference
        verdict = f"differ ({t.method})" if t.significant(alpha) else f"tied ({t.method})"
        table.add_row(
            t.metric,
            f"{t.estimate_a:.4f}",
            f"{t.estimate_b:.4f}",
            f"{d.estimate:+.4f} [{d.low:+.4f}, {d.high:+.4f}]",
            f"{t.p_value:.4g}",
            verdict,
        )
    console.print(table)


def register(app: typer.Typer) -> None:
    """Attach ``compare`` to the ``certbench`` command."""
    app.command("compare")(compare_command)
