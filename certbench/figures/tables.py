"""Tables for papers: the columns a leaderboard or compare page shows, with 95 % intervals and
"tied" marks, as CSV here and as LaTeX in :mod:`certbench.figures.latex`.

A :class:`Table` holds numbers, not text: CSV writes each figure and its interval as three
columns (``<key>``, ``<key>_low``, ``<key>_high``; empty when not measured) so a script reads
them back exactly (:func:`read_csv`). :data:`SYMBOLS` and :data:`SPECIAL` say how the pages'
text becomes LaTeX (``σ`` → ``\\ensuremath{\\sigma}``, ``%`` → ``\\%``).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from certbench.figures.spreadsheet import csv_writer, safe_cell, unquoted_cell

#: Symbols the pages use → LaTeX (text mode).
SYMBOLS = {
    "σ": r"\ensuremath{\sigma}",
    "α": r"\ensuremath{\alpha}",
    "ε": r"\ensuremath{\varepsilon}",
    "ℓ": r"\ensuremath{\ell}",
    "∞": r"\ensuremath{\infty}",
    "∩": r"\ensuremath{\cap}",
    "≥": r"\ensuremath{\geq}",
    "≤": r"\ensuremath{\leq}",
    "−": "-",
    "–": "--",
    "—": "---",
    "×": r"\ensuremath{\times}",
    "±": r"\ensuremath{\pm}",
    "↑": r"\ensuremath{\uparrow}",
    "↓": r"\ensuremath{\downarrow}",
    "Φ": r"\ensuremath{\Phi}",
    "²": r"\textsuperscript{2}",
    "₂": r"\textsubscript{2}",
    "p̂": r"\ensuremath{\hat{p}}",
    "…": r"\ldots{}",
    "“": "``",
    "”": "''",
    "’": "'",
    "‘": "`",
    "\u00a0": "~",
}
SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


@dataclass(frozen=True)
class Column:
    """A column: ``key`` (CSV header), ``header`` (the page's label), ``kind``: "text", or how a
    figure prints: "percent" (×100, one decimal), "radius", "probability", "number";
    ``group``: adjacent columns of one group share a spanning LaTeX header (e.g. "Certified
    accuracy at radius r" over "0", "0.25", ...), their own headers below it."""

    key: str
    header: str
    kind: str = "number"
    group: str = ""

    @property
    def numeric(self) -> bool:
        return self.kind != "text"


@dataclass(frozen=True)
class Cell:
    """A figure with its 95 % interval (None: not measured)."""

    value: float | None
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class Table:
    """Rows of cells under columns, a caption, a LaTeX label and notes printed under it."""

    caption: str
    label: str
    columns: list[Column]
    rows: list[Mapping[str, Cell | str | None]]
    notes: list[str] = field(default_factory=list)


def csv_header(columns: Sequence[Column]) -> list[str]:
    out = []
    for column in columns:
        out += (
            [column.key, f"{column.key}_low", f"{column.key}_high"]
            if column.numeric
            else [column.key]
        )
    return out


def _csv_number(value: float | None) -> str:
    return "" if value is None or not math.isfinite(value) else repr(float(value))


def to_csv(table: Table) -> str:
    """One header line of keys (each figure followed by ``_low`` and ``_high``), one line per
    row; numbers unrounded, empty where not measured. Text that begins like a spreadsheet
    formula is prefixed with a single quote (``certbench.figures.spreadsheet``); numbers are
    written as numbers, negative ones included."""
    buffer = io.StringIO()
    writer = csv_writer(buffer)
    writer.writerow([safe_cell(key) for key in csv_header(table.columns)])
    for row in table.rows:
        line: list[str] = []
        for column in table.columns:
            cell = row.get(column.key)
            if not column.numeric:
                line.append(safe_cell(str(cell or "")))
            elif isinstance(cell, Cell):
                line += [_csv_number(cell.value), _csv_number(cell.low), _csv_number(cell.high)]
            else:
                line += ["", "", ""]
        writer.writerow(line)
    return buffer.getvalue()


def read_csv(text: str, columns: Sequence[Column]) -> list[dict[str, Cell | str]]:
    """Rows of a CSV written by :func:`to_csv` for ``columns`` (the round trip: text cells
    without the quote that kept a spreadsheet from evaluating them)."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if reader.fieldnames != csv_header(columns):
        raise ValueError(f"CSV header {reader.fieldnames} is not {csv_header(columns)}")

    def number(text: str) -> float | None:
        return float(text) if text else None

    out = []
    for line in reader:
        row: dict[str, Cell | str] = {}
        for c in columns:
            if c.numeric:
                row[c.key] = Cell(number(line[c.key]), number(line[f"{c.key}_low"]),
                                  number(line[f"{c.key}_high"]))  # fmt: skip
            else:
                row[c.key] = unquoted_cell(line[c.key])
        out.append(row)
    return out
