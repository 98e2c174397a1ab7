"""Tables as LaTeX a paper can use (issue 34 §2: all 17 columns in one ``\\resizebox{\\linewidth}``
shrank the text to about 3 pt).

The layout is the papers' (Cohen, Rosenfeld & Kolter, "Certified Adversarial Robustness via
Randomized Smoothing", ICML 2019, arXiv:1902.02918, Table 1; Salman et al., NeurIPS 2019,
arXiv:1906.04584; Sun, Mao, Müller & Vechev, ICML 2025): a booktabs ``tabular`` whose adjacent
columns of one group (certified accuracy at each radius) sit under one spanning header with a
``\\cmidrule``, each figure's 95 % interval under it in the same cell at ``\\footnotesize``
(8 pt in a 10 pt paper; the ``\\cbci`` macro the float defines), never scaled. The float is a
``table`` when the estimated width fits one column of a two-column paper, else a ``table*``
across both; the figures are at ``\\small`` (9 pt) or, where that is what it takes to fit, at
``\\footnotesize`` (8 pt); a long text column (model names) wraps in a ``p`` column instead of
widening the table. A selection too wide even for both columns is still written, at 8 pt,
with a comment saying so (choose fewer columns).

Widths are estimated from Computer Modern's advance widths (Knuth, *Computer Modern Typefaces*,
1986: digits 0.5 em, capitals about 0.72 em, the period 0.28 em), rounded up; the suite
compiles the exports in a two-column page and fails on an overfull box.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from certbench.figures.tables import SPECIAL, SYMBOLS, Cell, Column, Table

PACKAGES = ("booktabs", "array")
"""What the export needs in the preamble (``booktabs``: texlive-latex-recommended; ``array``:
the base distribution's tools)."""

COLUMN_WIDTH_PT = 234.0
"""One column of a two-column paper: ICML's 3.25 in (CVPR's too; IEEE's 3.5 in is wider)."""
TEXT_WIDTH_PT = 487.0
"""Both columns: ICML's 6.75 in text width, the narrowest of the common two-column styles."""
BODY_PT = 9.0
"""``\\small`` in a 10 pt paper: the figures and the text of the table."""
INTERVAL_PT = 8.0
"""``\\footnotesize`` in a 10 pt paper: the intervals' second line."""
TABCOLSEP_PT = 4.0
"""Space either side of a cell (LaTeX's default is 6 pt)."""
MIN_WRAP_PT = 56.0
"""The narrowest a wrapped text column gets (about 11 characters at 9 pt)."""
SAFETY = 1.08
"""Margin on the estimate: 9 and 8 pt Computer Modern are wider per em than 10 pt."""

_NARROW = set("ijlrtfI.,;:'!|()[]/ ")
_WIDE = set("mwMW@%")


INTERVAL_MACRO = (
    r"\providecommand{\cbci}[2]{\begin{tabular}[t]{@{}c@{}}#1\\{\footnotesize #2}\end{tabular}}"
)
"""A figure (``#1``) over its interval (``#2``) in one cell, top-aligned with the row."""


def latex_text(text: str) -> str:
    """``text`` escaped for LaTeX text mode, the pages' symbols as math."""
    out = []
    i = 0
    while i < len(text):
        pair = text[i : i + 2]
        if pair in SYMBOLS:
            out.append(SYMBOLS[pair])
            i += 2
            continue
        char = text[i]
        out.append(SPECIAL.get(char) or SYMBOLS.get(char) or char)
        i += 1
    return "".join(out)


def text_width(text: str, size_pt: float) -> float:
    """The estimated printed width (pt) of ``text`` at ``size_pt`` in Computer Modern."""
    ems = 0.0
    for char in text:
        if char in _NARROW:
            ems += 0.28
        elif char in _WIDE:
            ems += 0.83
        elif char.isupper():
            ems += 0.72
        else:
            ems += 0.5
    return ems * size_pt * SAFETY


def number(value: float | None, kind: str) -> str:
    """A figure as the table prints it: percentages ×100 with one decimal, the rest with three."""
    if value is None or not math.isfinite(value):
        return ""
    if kind == "percent":
        return f"{value * 100:.1f}"
    return f"{value:.3f}"


def _interval(cell: Cell | str | None, column: Column) -> str:
    if not column.numeric or not isinstance(cell, Cell) or cell.value is None:
        return ""
    if cell.low is None or cell.high is None:
        return ""
    return f"{number(cell.low, column.kind)}–{number(cell.high, column.kind)}"


def _value(cell: Cell | str | None, column: Column) -> str:
    if not column.numeric:
        return str(cell or "")
    if not isinstance(cell, Cell) or cell.value is None:
        return "–"
    return number(cell.value, column.kind)


def _header(column: Column) -> str:
    """A column's own header: under a group, the group names the unit."""
    percent = column.kind == "percent" and not column.group
    return column.header + (" (%)" if percent else "")


def _group_header(group: str, members: list[Column]) -> str:
    percent = all(c.kind == "percent" for c in members) and "%" not in group
    return group + (" (%)" if percent else "")


@dataclass(frozen=True)
class Layout:
    """Where the table goes (``table`` or ``table*``), its type size (``small``: 9 pt, or
    ``footnotesize``: 8 pt, in a 10 pt paper), each column's LaTeX spec, the spanning headers'
    lines and the estimated width."""

    environment: str
    size: str
    specs: list[str]
    group_lines: dict[str, list[str]]
    width_pt: float

    @property
    def fits(self) -> bool:
        limit = COLUMN_WIDTH_PT if self.environment == "table" else TEXT_WIDTH_PT
        return self.width_pt <= limit


SIZES = (("small", BODY_PT), ("footnotesize", INTERVAL_PT))
"""The type sizes a table is tried at, largest first (never under 8 pt)."""


def _wrap(text: str, width: float, size: float) -> list[str]:
    """``text`` broken at spaces into lines no wider than ``width`` (a word wider stays whole)."""
    lines: list[str] = []
    for word in text.split():
        if lines and text_width(f"{lines[-1]} {word}", size) <= width:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return lines


def _widths(table: Table, intervals: bool, size: float) -> tuple[list[float], dict[str, list[str]]]:
    """Each column's natural width at ``size`` and each spanning header's lines."""
    widths = []
    for column in table.columns:
        cells = [text_width(_value(row.get(column.key), column), size) for row in table.rows]
        if intervals:
            cells += [
                text_width(_interval(row.get(column.key), column), INTERVAL_PT)
                for row in table.rows
            ]
        header = _header(column)
        # a wrapped text column's header wraps too; a header never wraps in a c column
        cells.append(text_width(header if column.numeric else header.split()[0], size))
        widths.append(max(cells))
    lines: dict[str, list[str]] = {}
    for group, members in _groups(table.columns):
        if not group:
            continue
        span = sum(widths[i] for i in members) + 2 * TABCOLSEP_PT * (len(members) - 1)
        text = _group_header(group, [table.columns[i] for i in members])
        lines[group] = _wrap(text, span, size)
        need = max(text_width(line, size) for line in lines[group])
        if need > span:  # a spanning header wider than its columns widens them
            for i in members:
                widths[i] += (need - span) / len(members)
    return widths, lines


def _groups(columns: list[Column]) -> list[tuple[str, list[int]]]:
    """Runs of adjacent columns with the same group, as (group, column indices)."""
    runs: list[tuple[str, list[int]]] = []
    for i, column in enumerate(columns):
        if runs and column.group and runs[-1][0] == column.group:
            runs[-1][1].append(i)
        else:
            runs.append((column.group, [i]))
    return runs


def layout(table: Table, *, intervals: bool = True) -> Layout:
    """The float, type size and column specs: one column of a two-column paper at 9 pt, else
    at 8 pt, else both columns at 9 pt, else at 8 pt; text columns wider than a common cap (at
    least ``MIN_WRAP_PT``) wrap at that cap when that is what it takes to fit. A table that
    fits nowhere is set across both columns at 8 pt, its text columns at ``MIN_WRAP_PT``."""
    text = [i for i, c in enumerate(table.columns) if not c.numeric]
    padding = 2 * TABCOLSEP_PT * (len(table.columns) - 1)  # @{} at both edges
    for environment, limit in (("table", COLUMN_WIDTH_PT), ("table*", TEXT_WIDTH_PT)):
        for size_name, size in SIZES:
            widths, lines = _widths(table, intervals, size)
            fixed = sum(w for i, w in enumerate(widths) if i not in text) + padding
            cap = _cap([widths[i] for i in text], limit - fixed)
            if cap is not None:
                wrapped = {i: cap for i in text if widths[i] > cap}
                total = fixed + sum(min(widths[i], cap) for i in text)
                specs = _specs(table, wrapped)
                return Layout(environment, size_name, specs, lines, total)
    widths, lines = _widths(table, intervals, INTERVAL_PT)
    wrapped = {i: MIN_WRAP_PT for i in text if widths[i] > MIN_WRAP_PT}
    total = sum(min(w, MIN_WRAP_PT) if i in text else w for i, w in enumerate(widths)) + padding
    return Layout("table*", "footnotesize", _specs(table, wrapped), lines, total)


def _cap(widths: list[float], room: float) -> float | None:
    """The largest width W ≥ MIN_WRAP_PT with sum(min(w, W)) ≤ room (W = the widest when
    nothing need wrap), or None."""
    if sum(widths) <= room:
        return max(widths, default=0.0)
    if sum(min(w, MIN_WRAP_PT) for w in widths) > room:
        return None
    ordered = sorted(widths)
    for k, w in enumerate(ordered):  # the columns from k on are capped
        cap = (room - sum(ordered[:k])) / (len(ordered) - k)
        if cap <= w:
            return max(cap, MIN_WRAP_PT)
    return ordered[-1]


def _specs(table: Table, wrapped: dict[int, float]) -> list[str]:
    specs = []
    for i, column in enumerate(table.columns):
        if i in wrapped:
            specs.append(rf">{{\raggedright\arraybackslash}}p{{{math.floor(wrapped[i])}pt}}")
        else:
            specs.append("c" if column.numeric else "l")
    return specs


def to_latex(table: Table, *, intervals: bool = True) -> str:
    """The table as a LaTeX float in the papers' layout (module docstring). ``intervals``: each
    figure's 95 % interval on a second line (``low–high``, 8 pt), as the notes say."""
    shown = intervals and any(
        _interval(row.get(c.key), c) for row in table.rows for c in table.columns
    )
    plan = layout(table, intervals=shown)
    size_pt = dict(SIZES)[plan.size]
    where = "one column of a two-column paper" if plan.environment == "table" else "both columns"
    lines = [
        "% Generated by certbench. Needs "
        + " and ".join(rf"\usepackage{{{p}}}" for p in PACKAGES)
        + ".",
        f"% About {math.ceil(plan.width_pt)} pt wide at {size_pt:g} pt (\\{plan.size} in a "
        f"10 pt paper): set across {where}.",
    ]
    if not plan.fits:
        lines.append(
            f"% Wider than a two-column paper's text ({TEXT_WIDTH_PT:g} pt): choose fewer "
            "columns (certbench export --columns, or the columns query parameter)."
        )
    lines += [
        rf"\begin{{{plan.environment}}}[t]",
        r"\centering",
        rf"\{plan.size}",
        rf"\setlength{{\tabcolsep}}{{{TABCOLSEP_PT:g}pt}}",
        *([INTERVAL_MACRO] if shown else []),
        rf"\caption{{{latex_text(table.caption)}}}",
        rf"\label{{{table.label}}}",
        rf"\begin{{tabular}}{{@{{}}{''.join(plan.specs)}@{{}}}}",
        r"\toprule",
    ]
    groups = _groups(table.columns)
    if any(group for group, _ in groups):
        spans, rules = [], []
        for group, members in groups:
            if not group:
                spans += [""] * len(members)
                continue
            header = r"\\".join(latex_text(line) for line in plan.group_lines[group])
            if len(plan.group_lines[group]) > 1:
                header = rf"\begin{{tabular}}{{@{{}}c@{{}}}}{header}\end{{tabular}}"
            spans.append(rf"\multicolumn{{{len(members)}}}{{c}}{{{header}}}")
            rules.append(rf"\cmidrule(lr){{{members[0] + 1}-{members[-1] + 1}}}")
        lines += [" & ".join(spans) + r" \\", "".join(rules)]
    lines += [" & ".join(latex_text(_header(c)) for c in table.columns) + r" \\", r"\midrule"]
    for n, row in enumerate(table.rows):
        if shown and n:
            lines.append(r"\addlinespace[2pt]")
        cells = []
        for column in table.columns:
            value = latex_text(_value(row.get(column.key), column))
            interval = _interval(row.get(column.key), column) if shown else ""
            cells.append(rf"\cbci{{{value}}}{{{latex_text(interval)}}}" if interval else value)
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    for note in table.notes:
        lines.append(rf"\par\smallskip{{\footnotesize {latex_text(note)}\par}}")
    lines.append(rf"\end{{{plan.environment}}}")
    return "\n".join(lines) + "\n"
