"""How the client commands show things: tables of a submission's status, its results and a
leaderboard, and the progress bars of an upload, a download and a running evaluation.

Imported by ``certbench.cli.client`` inside its commands only (rich is not needed for
``--help``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from certbench.client import (
    Leaderboard,
    Results,
    Submission,
    TestSetProgress,
)

#: Summary figures shown under a results table, in this order (leaderboard keys).
SUMMARY_KEYS = (
    ("macr", "mean ACR"),
    ("clean_accuracy", "clean accuracy (smoothed)"),
    ("abstain_rate", "abstain rate"),
    ("band_low", "low-band mean ACR"),
    ("band_mid", "mid-band mean ACR"),
    ("band_high", "high-band mean ACR"),
    ("base_accuracy", "base classifier accuracy"),
    ("linf_acc_8", "ℓ∞ robust accuracy, ε = 8/255"),
    ("pd_acc_8", "ℓ∞ ∩ PD robust accuracy, ε = 8/255"),
)


def duration(seconds: float | None) -> str:
    """``45 s``, ``3 min 20 s``, ``2 h 05 min``, ``3 d 4 h``; ``–`` when unknown."""
    if seconds is None or seconds < 0:
        return "–"
    total = round(seconds)
    if total < 60:
        return f"{total} s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def fixed(value: Any, digits: int = 4) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else "–"


def eta_text(submission: Submission) -> str:
    """``ETA 3 min 20 s`` when the server estimates one, else the queue position or ''."""
    if submission.eta_seconds is not None and not submission.terminal:
        return f"ETA {duration(submission.eta_seconds)}"
    if submission.queue_position is not None:
        return f"#{submission.queue_position} in queue"
    return ""


def rate_text(submission: Submission) -> str:
    rate = submission.throughput
    if rate is None:
        return ""
    parts = []
    if rate.samples_per_second is not None:
        parts.append(f"{rate.samples_per_second:,.0f} samples/s")
    if rate.images_per_second is not None:
        parts.append(f"{rate.images_per_second:,.3g} images/s")
    return ", ".join(parts)


def status_table(submission: Submission, progress: Sequence[TestSetProgress]) -> Table:
    """Everything the owner may want to know about a submission, one fact per row."""
    table = Table(
        title=f"submission {submission.id}: {submission.model_name} on {submission.benchmark}",
        show_header=False,
    )
    table.add_column("fact", style="bold")
    table.add_column("value")
    reason = f" ({submission.reason})" if submission.reason else ""
    table.add_row("state", f"{submission.state}{reason}")
    if submission.message:
        table.add_row("message", submission.message)
    table.add_row("σ, architecture", f"{submission.sigma} · {submission.architecture}")
    shards = (
        f" (shards {submission.shards_done}/{submission.shards_total})"
        if submission.shards_total
        else ""
    )
    table.add_row("progress", f"{submission.progress:.1%}{shards}")
    if submission.queue_position is not None:
        table.add_row("queue position", str(submission.queue_position))
    if submission.eta_seconds is not None and not submission.terminal:
        table.add_row("time left (ETA)", duration(submission.eta_seconds))
    if rate_text(submission):
        table.add_row("throughput", rate_text(submission))
    estimate = submission.estimate
    if estimate is not None:
        passes = f"{estimate.forward_passes:,} forward passes" if estimate.forward_passes else ""
        if passes and estimate.flops:
            passes += f" ({estimate.flops:.3g} FLOPs)"
        time = f"≈ {duration(estimate.seconds)}" if estimate.seconds is not None else ""
        basis = f" ({estimate.basis})" if estimate.basis else ""
        table.add_row("estimated work", ", ".join(p for p in (passes, time) if p) + basis)
    for ts in progress:
        table.add_row(f"  {ts.test_set}", f"{ts.images_done}/{ts.images_total} images")
    if submission.duplicate_of is not None:
        table.add_row("results of", f"submission {submission.duplicate_of}")
    table.add_row("weights", weights_text(submission))
    return table


def weights_text(submission: Submission) -> str:
    if submission.weights is not None:
        return f"published ({submission.weights.license}): certbench download {submission.id}"
    if submission.weights_public:
        return f"published ({submission.weights_license}) once the entry has finished"
    return "not published"


def results_table(results: Results) -> Table:
    """Per test set: images, ACR, certified accuracy at each radius, abstain rate; then the
    summary figures the leaderboard ranks by."""
    radii = sorted({r for ts in results.results for r in ts.certified_accuracy}, key=_radius_order)
    table = Table(title=f"{results.model_name} (#{results.submission_id}) on {results.benchmark}")
    table.add_column("test set")
    table.add_column("images", justify="right")
    table.add_column("ACR", justify="right")
    for radius in radii:
        table.add_column(f"cert. acc. r={radius}", justify="right")
    table.add_column("abstain", justify="right")
    for ts in results.results:
        table.add_row(
            ts.test_set,
            str(ts.count) if ts.count is not None else "–",
            fixed(ts.acr),
            *(fixed(ts.certified_accuracy.get(r)) for r in radii),
            fixed(ts.abstain_rate),
        )
    return table


def summary_table(summary: Mapping[str, Any]) -> Table:
    table = Table(title="summary (means over test sets)", show_header=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, label in SUMMARY_KEYS:
        if isinstance(summary.get(key), int | float):
            table.add_row(label, fixed(summary[key]))
    for key in sorted(k for k in summary if k.startswith("cert_acc_") and "_ci_" not in k):
        if isinstance(summary.get(key), int | float):
            radius = int(key.removeprefix("cert_acc_")) / 100
            table.add_row(f"certified accuracy, r = {radius:g}", fixed(summary[key]))
    return table


def leaderboard_table(board: Leaderboard) -> Table:
    """Ranked rows: the sort figure, mACR, and where published weights can be downloaded."""
    shown = [board.sort] if board.sort and board.sort != "macr" else []
    shown = [k for k in shown if any(k in row.metrics for row in board.rows)]
    used = (
        f"{board.sort_label} ({board.sort}, {board.order})"
        if board.sort_label and board.sort_label != board.sort
        else f"{board.sort} ({board.order})"
    )
    table = Table(
        title=f"{board.benchmark}: {len(board.rows)} of {board.total} entries, sorted by {used}"
    )
    for header in ("#", "id", "model", "owner", "σ"):
        table.add_column(header, justify="right" if header in ("#", "id", "σ") else "left")
    for key in [*shown, "macr"]:
        table.add_column(key, justify="right")
    table.add_column("weights")
    for row in board.rows:
        rank = str(row.rank) if row.rank is not None else "–"
        if row.tied_with is not None:
            rank += f" (= #{row.tied_with})"
        table.add_row(
            rank,
            str(row.submission_id),
            row.model_name,
            row.owner,
            f"{row.sigma:g}" if row.sigma is not None else "–",
            *(fixed(row.metrics.get(k)) for k in [*shown, "macr"]),
            row.weights.license if row.weights is not None else "",
        )
    return table


def _radius_order(radius: str) -> float:
    try:
        return float(radius)
    except ValueError:
        return float("inf")


@contextmanager
def transfer_bar(console: Console, description: str) -> Iterator[Any]:
    """A bytes progress bar; yields ``update(done, total)``."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None)

        yield update


@contextmanager
def run_bar(console: Console, submission: Submission) -> Iterator[Any]:
    """The evaluation's progress (the server's fraction done) with its ETA; yields
    ``update(submission)``, which also prints every change of state as a line."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[eta]}"),
        TextColumn("{task.fields[rate]}", style="dim"),
        TimeElapsedColumn(),
    )
    seen = {"state": ""}
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(f"#{submission.id} {submission.state}", total=1.0, eta="", rate="")

        def update(current: Submission) -> None:
            if current.state != seen["state"]:
                seen["state"] = current.state
                bar.console.print(
                    f"submission {current.id}: {current.state}"
                    + (f" — {current.message}" if current.message else "")
                )
            bar.update(
                task,
                completed=1.0 if current.state == "finished" else current.progress,
                description=f"#{current.id} {current.state}",
                eta=eta_text(current),
                rate=rate_text(current),
            )

        yield update
