"""Paper-ready exports of what the leaderboard and compare pages show: LaTeX (booktabs) and CSV
tables of the shown columns with 95 % intervals and "tied" marks, and BibTeX for each entry's
paper and for the benchmark's (data sets', protocols') papers. Built from the same service
answers as the pages (``api.services.leaderboards``); formats by ``certbench.figures``.
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
    "Brackets: 95 % intervals over the sampled images (Clopper–Pearson for a proportion on one "
    "test set; bootstrap over the shared source images otherwise). Percentages in %."
)


def _columns(page: Sequence[PageColumn]) -> list[Column]:
    kinds = {"percent": "percent"}
    return [Column(c.key, c.header, kinds.get(c.kind, "number")) for c in page]


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
            architecture=str((manifest.get("architecture") or {}).get("name", "")),
            metrics=results.summary,
            tied_with=None,
            authors=list(meta.get("authors") or []),
            paper_url=meta.get("paper_url"),
            venue=meta.get("venue"),
            submitted=submitted,
        )


def _cell(metrics: Metrics | None, key: str) -> Cell:
    if metrics is None:
        return Cell(None)
    interval = metrics.intervals.get(key)
    low = getattr(interval, "ci_low", None) if interval is not None else None
    high = getattr(interval, "ci_high", None) if interval is not None else None
    return Cell(getattr(metrics, key, None), low, high)


def entries_table(
    entries: Sequence[Entry], bench: BenchmarkPublic, *, sort: str, protocol: str
) -> Table:
    """The page's rows and columns: rank, model, σ, architecture, every figure with its
    interval, and "tied with #k" where the entry does not differ from the one above."""
    figures = _columns(metric_columns(bench))
    columns = [
        Column("rank", "Rank", "text"),
        Column("model", "Model", "text"),
        Column("submission_id", "Entry", "text"),
        Column("sigma", "σ", "text"),
        Column("architecture", "Architecture", "text"),
        *figures,
        Column("tied_with", "Tied with", "text"),
    ]
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
    return Table(
        caption=f"{bench.title}: entries ranked by {label} (protocol {protocol}).",
        label=f"tab:certbench-{bench.name}",
        columns=columns,
        rows=rows,
        notes=[
            INTERVALS_NOTE,
            f"Tied with #k: not significantly different from the entry ranked k in {label} "
            "(paired test on the same images, 5 % level).",
        ],
    )


def leaderboard_table(board: LeaderboardPublic, bench: BenchmarkPublic) -> Table:
    """The leaderboard page as a table."""
    return entries_table(
        Entry.rows_of(board), bench, sort=board.sort, protocol=board.protocol_version
    )


def compare_table(entries: Sequence[Entry], bench: BenchmarkPublic) -> Table:
    """The compared entries side by side (one row each, in the order asked)."""
    table = entries_table(entries, bench, sort="macr", protocol=bench.protocol.version)
    keep = [c for c in table.columns if c.key not in ("rank", "tied_with")]
    return Table(
        caption=f"{bench.title}: compared entries (protocol {bench.protocol.version}).",
        label=f"tab:certbench-{bench.name}-compare",
        columns=keep,
        rows=table.rows,
        notes=[INTERVALS_NOTE],
    )


def paired_table(comparison: ComparisonPublic, bench: BenchmarkPublic) -> Table:
    """Every paired test: A, B, the figure (its label), both estimates, A − B with its 95 %
    interval, p and the verdict ("tied": not significant at 5 %)."""
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
