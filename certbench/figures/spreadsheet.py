"""CSV cells that a spreadsheet reads as data, never as a formula (CSV injection).

Excel, LibreOffice Calc and Google Sheets evaluate a cell that begins with ``=``, ``+``, ``-`` or
``@`` as a formula (``=HYPERLINK(...)``, ``+cmd|' /C calc'!A0``, ``@SUM(1+1)*cmd``, ``-2+3``),
and a leading tab or carriage return can hide such a cell from a reader. OWASP's rule ("CSV
Injection", owasp.org/www-community/attacks/CSV_Injection): prefix every such cell with a single
quote, which the spreadsheet shows as text and does not evaluate. Numbers stay numbers: a value
written from a float (``-0.5`` in a figure's column) is left as it is; only text is prefixed.

Every CSV that certbench writes goes through here: :func:`~certbench.figures.tables.to_csv`
(the service's exports) prefixes its text columns with :func:`safe_cell`; the ``certbench
export`` command passes what a server sent through :func:`safe_csv` before writing it, so a
server that predates this rule cannot hand a formula to the user's spreadsheet either.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""First characters that make a spreadsheet evaluate (or hide) a cell (OWASP)."""

QUOTE = "'"


def csv_writer(buffer: io.StringIO) -> Any:
    """The writer of every certbench CSV: RFC 4180 (comma, CRLF line ends, fields quoted when
    they hold a comma, a quote or a line break). CRLF matters beyond style: Python's writer
    quotes a field only for the characters of its line terminator, so with ``\n`` a name holding
    a bare carriage return was written unquoted and a spreadsheet started a new row there, with
    whatever followed it (``x\r=HYPERLINK(...)``) as an unprefixed first cell."""
    return csv.writer(buffer, lineterminator="\r\n")


def safe_cell(text: str) -> str:
    """``text`` prefixed with a single quote when it begins like a formula, else unchanged."""
    return QUOTE + text if text.startswith(FORMULA_STARTS) else text


def unquoted_cell(text: str) -> str:
    """The text :func:`safe_cell` was given (for reading back what it wrote): a single quote
    before a formula's first character is dropped. A text that itself began with a quote and a
    formula character reads back without its quote: no name a page shows does."""
    if text.startswith(QUOTE) and text[1:].startswith(FORMULA_STARTS):
        return text[1:]
    return text


def is_number(text: str) -> bool:
    """Whether ``text`` is a finite real number as Python writes one (``-0.5``, ``1e-05``):
    what a spreadsheet reads as a number, not a formula. Python's own leniencies (surrounding
    white space, ``1_000``) do not count: a leading tab is exactly what must be prefixed."""
    if text != text.strip() or "_" in text:
        return False
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def safe_csv(text: str) -> str:
    """A whole CSV document with every cell that is not a number passed through
    :func:`safe_cell`, written as :func:`csv_writer` writes.

    For CSV whose column kinds are unknown here (the text a server sent): a cell that parses as
    a finite number cannot be a formula and is kept; a cell already prefixed is kept as it is, so
    applying this twice changes nothing."""
    buffer = io.StringIO()
    writer = csv_writer(buffer)
    for row in csv.reader(io.StringIO(text, newline="")):
        writer.writerow([cell if is_number(cell) else safe_cell(cell) for cell in row])
    return buffer.getvalue()
