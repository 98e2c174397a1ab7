"""Paper-ready exports of what the leaderboard and compare pages show: LaTeX (booktabs) and CSV
tables with 95 % intervals and "tied" marks, and BibTeX for each entry's paper and for the
benchmark's (data sets', protocols') papers. Built from the same service answers as the pages
(``api.services.leaderboards``); formats by ``certbench.figures``.

Columns are chosen by key or by the label the page shows, in any case (``columns``:
:func:`select_columns`). By default the LaTeX table has the papers' layout (issue 34 §2): model,
σ, certified accuracy at the benchmark's radii under one header, and ACR (Cohen et al., ICML
2019, Table 1); the CSV has every column, for scripts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from api.schemas.benchmark import BenchmarkPublic
from api.schemas.comparison import ComparisonPublic
from api.schemas.leaderboard import LeaderboardPublic, Metrics
from api.schemas.result import ResultsPublic
from api.web.leaderboard_view import Column as PageColumn
from api.web.leaderboard_view import metric_columns
from certbench.denoising import LABEL_SEPARATOR
from certbench.figures import (
    Cell,
    Column,
    Reference,
    Table,
    benchmark_references,
    entry_reference,
    to_bibtex,
    to_csv,
    to_latex,
)


class ExportFormat(StrEnum):
    """What an export is written as."""

    latex = "latex"
    csv = "csv"
    bibtex = "bibtex"


MEDIA_TYPES = {
    ExportFormat.latex: ("application/x-tex", "tex"),
    ExportFormat.csv: ("text/csv", "csv"),
    ExportFormat.bibtex: ("application/x-bibtex", "bib"),
}
INTERVALS_NOTE = (
    "Under each figure: its 95 % interval over the sampled images (Clopper–Pearson for a "
    "proportion on one test set; bootstrap over the shared source images otherwise). "
    "Percentages in %."
)
RADIUS_GROUP = "Certified accuracy at ℓ₂ radius"
"""The spanning header over the certified-accuracy columns (the papers' layout)."""
RADIUS_PREFIX = "cert_acc_"
TEXT_COLUMNS = (
    (Column("rank", "Rank", "text"), ()),
    (Column("model", "Model", "text"), ("name", "model_name")),
    (Column("submission_id", "Entry", "text"), ("id",)),
    (Column("sigma", "σ", "text"), ("sigma",)),
    (Column("architecture", "Architecture", "text"), ("arch",)),
)
TIED = (Column("tied_with", "Tied with", "text"), ("tied",))
PAPER_TEXT = ("model", "sigma")
"""The text columns of the papers' layout; then the radii and the average certified radius."""


class ColumnError(ValueError):
    """A requested column the table does not have (the message names the ones it has)."""


@dataclass(frozen=True)
class Choice:
    """A column that can be asked for, and the names it answers to besides its key and label."""

    column: Column
    label: str
    aliases: tuple[str, ...] = ()

    def names(self) -> set[str]:
        return {_name(n) for n in (self.column.key, self.label, *self.aliases)}


def _name(text: str) -> str:
    """A column name as compared: case and spaces ignored, a trailing "(%)" dropped."""
    folded = "".join(text.casefold().split())
    return folded.removesuffix("(%)")


def _figure_column(c: PageColumn) -> Column:
    kind = "percent" if c.kind == "percent" else "number"
    if c.key.startswith(RADIUS_PREFIX):
        return Column(c.key, c.header.removeprefix("r = "), kind, group=RADIUS_GROUP)
    return Column(c.key, c.header, kind)


def choices(bench: BenchmarkPublic, *, ranked: bool = True) -> list[Choice]:
    """Every column an export of this benchmark can hold, in the page's order: rank (when
    ``ranked``), model, entry, σ, architecture, every figure, tied with (when ``ranked``)."""
    text = [Choice(c, c.header, a) for c, a in TEXT_COLUMNS if ranked or c.key != "rank"]
    figures = [Choice(_figure_column(c), c.header) for c in metric_columns(bench)]
    tied = [Choice(TIED[0], TIED[0].header, TIED[1])] if ranked else []
    return [*text, *figures, *tied]


def picker(bench: BenchmarkPublic) -> list[tuple[str, str, bool]]:
    """(key, label, in the papers' layout) of every column, for the leaderboard's column
    picker: the papers' layout first and ticked, in its order (a form sends the ticked boxes
    in the order they stand, so the LaTeX default is what it sends untouched), then the rest
    in the page's order."""
    available = choices(bench)
    labels = {c.column.key: c.label for c in available}
    paper = [c.key for c in paper_columns(available)]
    rest = [c.column.key for c in available if c.column.key not in paper]
    return [(key, labels[key], key in paper) for key in [*paper, *rest]]


def paper_columns(available: Sequence[Choice]) -> list[Column]:
    """The papers' layout: model, σ, certified accuracy at each radius, then ACR (mACR)."""
    keys = [*PAPER_TEXT]
    keys += [c.column.key for c in available if c.column.key.startswith(RADIUS_PREFIX)]
    keys.append("macr")
    by_key = {c.column.key: c.column for c in available}
    return [by_key[k] for k in keys if k in by_key]


def select_columns(available: Sequence[Choice], wanted: Sequence[str]) -> list[Column]:
    """The columns named in ``wanted`` (each a key or the page's label, any case; items may be
    comma-separated lists), in that order, each once. Raises ColumnError naming the columns
    there are."""
    names = [part.strip() for item in wanted for part in item.split(",") if part.strip()]
    chosen: list[Column] = []
    for name in names:
        match = next((c for c in available if _name(name) in c.names()), None)
        if match is None:
            listed = ", ".join(f"{c.column.key} ({c.label})" for c in available)
            raise ColumnError(f"unknown column {name!r}; the columns are: {listed}")
        if match.column not in chosen:
            chosen.append(match.column)
    if not chosen:
        raise ColumnError("columns is empty: name at least one column")
    return chosen


@dataclass(frozen=True)
class Entry:
    """One shown entry: what its table row and its BibTeX entry need."""

    rank: int | None
    submission_id: int
    model: str
    sigma: float
    architecture: str
    metrics: Metrics | None
    tied_with: int | None
    authors: list[str]
    paper_url: str | None
    venue: str | None
    submitted: datetime | None

    @classmethod
    def rows_of(cls, board: LeaderboardPublic) -> list[Entry]:
        return [
            cls(r.rank, r.submission_id, r.model_name, r.sigma, r.architecture, r.metrics,
                r.tied_with, list(r.authors), r.paper_url, r.venue, r.submitted_at)
            for r in board.rows
        ]  # fmt: skip

    @classmethod
    def of_results(cls, results: ResultsPublic, submitted: datetime | None = None) -> Entry:
        manifest: dict[str, Any] = results.manifest
        meta = manifest.get("metadata") or {}
        return cls(
            rank=None,
            submission_id=results.submission_id,
            model=results.model_name,
            sigma=float((manifest.get("smoothing") or {}).get("sigma", float("nan"))),
            architecture=architecture_label(manifest),
            metrics=results.summary,
            tied_with=None,
            authors=list(meta.get("authors") or []),
            paper_url=meta.get("paper_url"),
            venue=meta.get("venue"),
            submitted=submitted,
        )


def architecture_label(manifest: dict[str, Any]) -> str:
    """The entry's architecture as the leaderboard shows it: the manifest's name, or
    ``<denoiser> · <classifier>`` for a denoised smoothing entry
    (``certbench.denoising.composition_label``)."""
    name = str((manifest.get("architecture") or {}).get("name", ""))
    denoiser = manifest.get("denoiser")
    kind = denoiser.get("kind") if isinstance(denoiser, dict) else None
    return f"{kind}{LABEL_SEPARATOR}{name}" if kind else name


def _cell(metrics: Metrics | None, key: str) -> Cell:
    if metrics is None:
        return Cell(None)
    interval = metrics.intervals.get(key)
    low = getattr(interval, "ci_low", None) if interval is not None else None
    high = getattr(interval, "ci_high", None) if interval is not None else None
    return Cell(getattr(metrics, key, None), low, high)


def entries_table(
    entries: Sequence[Entry],
    bench: BenchmarkPublic,
    *,
    sort: str,
    protocol: str,
    columns: Sequence[Column] | None = None,
    ranked: bool = True,
) -> Table:
    """The page's rows in ``columns`` (default: all of :func:`choices`): rank, model, σ,
    architecture, every figure with its interval, and "tied with #k" where the entry does not
    differ from the one above."""
    columns = list(columns) if columns is not None else [c.column for c in choices(bench)]
    figures = [c for c in columns if c.numeric]
    rows: list[Mapping[str, Cell | str | None]] = []
    for entry in entries:
        cells: dict[str, Cell | str | None] = {
            "rank": "" if entry.rank is None else str(entry.rank),
            "model": entry.model,
            "submission_id": f"#{entry.submission_id}",
            "sigma": f"{entry.sigma:g}",
            "architecture": entry.architecture,
            "tied_with": f"#{entry.tied_with}" if entry.tied_with else "",
        }
        cells.update({c.key: _cell(entry.metrics, c.key) for c in figures})
        rows.append(cells)
    label = bench.sort_keys.get(sort, sort)
    notes = [INTERVALS_NOTE] if figures else []
    if any(c.key == "tied_with" for c in columns):
        notes.append(
            f"Tied with #k: not significantly different from the entry ranked k in {label} "
            "(paired test on the same images, 5 % level)."
        )
    caption = (
        f"{bench.title}: entries ranked by {label} (protocol {protocol})."
        if ranked
        else f"{bench.title}: compared entries (protocol {protocol})."
    )
    return Table(
        caption=caption,
        label=f"tab:certbench-{bench.name}" + ("" if ranked else "-compare"),
        columns=columns,
        rows=rows,
        notes=notes,
    )


def table_columns(
    bench: BenchmarkPublic, fmt: ExportFormat, wanted: Sequence[str] | None, *, ranked: bool
) -> list[Column]:
    """The columns of an export: those ``wanted`` (keys or labels), else the papers' layout in
    LaTeX and every column in CSV. Raises ColumnError for a name the benchmark lacks."""
    available = choices(bench, ranked=ranked)
    if wanted:
        return select_columns(available, wanted)
    if fmt == ExportFormat.latex:
        return paper_columns(available)
    return [c.column for c in available]


def leaderboard_table(
    board: LeaderboardPublic, bench: BenchmarkPublic, columns: Sequence[Column] | None = None
) -> Table:
    """The leaderboard page as a table (``columns``: default every column)."""
    return entries_table(
        Entry.rows_of(board), bench, sort=board.sort, protocol=board.protocol_version,
        columns=columns,
    )  # fmt: skip


def compare_table(
    entries: Sequence[Entry], bench: BenchmarkPublic, columns: Sequence[Column] | None = None
) -> Table:
    """The compared entries side by side (one row each, in the order asked)."""
    if columns is None:
        columns = [c.column for c in choices(bench, ranked=False)]
    return entries_table(
        entries, bench, sort="macr", protocol=bench.protocol.version, columns=columns,
        ranked=False,
    )  # fmt: skip


def paired_table(
    comparison: ComparisonPublic, bench: BenchmarkPublic, figures: Sequence[str] | None = None
) -> Table:
    """Every paired test (of the ``figures`` keys, when given): A, B, the figure (its label),
    both estimates, A − B with its 95 % interval, p and the verdict ("tied": not significant
    at 5 %)."""
    labels = {**bench.sort_keys, **{c.key: c.header for c in metric_columns(bench)}}
    names = {e.submission_id: f"{e.model_name} (#{e.submission_id})" for e in comparison.entries}
    columns = [
        Column("a", "A", "text"),
        Column("b", "B", "text"),
        Column("figure", "Figure", "text"),
        Column("estimate_a", "A value"),
        Column("estimate_b", "B value"),
        Column("difference", "A − B"),
        Column("p_value", "p"),
        Column("verdict", "Verdict", "text"),
    ]
    rows: list[Mapping[str, Cell | str | None]] = []
    for pair in comparison.pairs:
        for test in pair.tests:
            if figures and test.metric not in figures:
                continue
            d = test.difference
            rows.append({
                "a": names.get(pair.a, f"#{pair.a}"),
                "b": names.get(pair.b, f"#{pair.b}"),
                "figure": labels.get(test.metric, test.metric),
                "estimate_a": Cell(test.estimate_a),
                "estimate_b": Cell(test.estimate_b),
                "difference": Cell(d.estimate, d.ci_low, d.ci_high),
                "p_value": Cell(test.p_value),
                "verdict": "tied" if test.tied else "differ",
            })  # fmt: skip
    return Table(
        caption=f"{bench.title}: paired tests on the same images (95 % intervals).",
        label=f"tab:certbench-{bench.name}-paired",
        columns=columns,
        rows=rows,
        notes=["Tied: the difference is not significant at the 5 % level."],
    )


def references(entries: Sequence[Entry], bench: BenchmarkPublic) -> list[Reference]:
    """BibTeX of the benchmark's papers, then each shown entry's paper."""
    sets = bench.test_sets
    repos = {t.dataset_repo for t in sets}
    bar = any("-bar" in r for r in repos)
    refs = benchmark_references(
        stages=list(bench.stages),
        corruptions=any(t.band for t in sets) and not bar,
        corruptions_bar=bar,
        fourier=any("f_c" in t.attributes for t in sets),
        cifar=bench.base_dataset.startswith("cifar"),
    )
    for entry in entries:
        refs.append(
            entry_reference(
                submission_id=entry.submission_id,
                name=entry.model,
                authors=entry.authors,
                paper_url=entry.paper_url,
                venue=entry.venue,
                year=(entry.submitted or datetime.now()).year,
            )
        )
    return refs


def render_tables(tables: Sequence[Table], fmt: ExportFormat) -> str:
    """LaTeX: every table, one float after another; CSV: the first table."""
    if fmt == ExportFormat.csv:
        return to_csv(tables[0])
    return "\n".join(to_latex(t) for t in tables)


def bibtex(refs: Sequence[Reference]) -> str:
    return to_bibtex(refs)
