"""The leaderboard's read model (``leaderboard_rows``): each entry's figures and display card in
one row, written where its figures are written.

A page used to load every ``metric_values`` row of its entries into ORM objects (33 per entry
on cifar10, ~1,650 for 50 rows). Now the page's ids still come from the (benchmark, key, value)
index, and the rows come from one Core ``select`` of this table joined with the few mutable
submission columns (flags, visibility, name). Every writer of ``metric_values`` calls
``refresh`` before its commit: the merge of a run (``models.runs.results``), the interval backfill
(``models.boards.interval_backfill``); a re-run deletes the row with the entry
(``models.submissions.lifecycle``). Migration 0011 builds the rows of entries finished before it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from models.db.entities import Artifact, LeaderboardFigures, MetricValue, Submission

CARD_FIELDS = ("authors", "paper_url", "code_url")


def card_of(manifest: dict[str, Any], sha256: str, size_bytes: int) -> dict[str, Any]:
    """The display fields of an entry that never change: the manifest's metadata (authors,
    paper and code links) and the weights file's SHA-256 and size."""
    metadata = manifest.get("metadata") or {}
    return {
        "authors": list(metadata.get("authors") or []),
        "paper_url": metadata.get("paper_url"),
        "code_url": metadata.get("code_url"),
        "sha256": sha256,
        "size_bytes": size_bytes,
    }


def stored_figures(session: Session, ids: Iterable[int]) -> dict[int, dict[str, float | None]]:
    """Every ``metric_values`` figure of the entries by id (the source of the read model)."""
    wanted = list(ids)
    out: dict[int, dict[str, float | None]] = {i: {} for i in wanted}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        for submission_id, key, value in session.execute(
            select(MetricValue.submission_id, MetricValue.key, MetricValue.value).where(
                MetricValue.submission_id.in_(chunk)
            )
        ):
            out[submission_id][key] = value
    return {i: dict(sorted(figures.items())) for i, figures in out.items()}


def build(session: Session, ids: Sequence[int]) -> list[dict[str, Any]]:
    """The read-model rows of the given entries, from the stored figures and artifacts."""
    figures = stored_figures(session, ids)
    rows = []
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        for submission_id, benchmark_id, manifest, sha256, size_bytes in session.execute(
            select(
                Submission.id,
                Submission.benchmark_id,
                Artifact.manifest,
                Artifact.sha256,
                Artifact.size_bytes,
            )
            .join(Artifact, Artifact.id == Submission.artifact_id)
            .where(Submission.id.in_(chunk))
        ):
            rows.append(
                {
                    "submission_id": submission_id,
                    "benchmark_id": benchmark_id,
                    "figures": figures[submission_id],
                    "card": card_of(manifest or {}, sha256, size_bytes),
                }
            )
    return rows


def refresh(session: Session, ids: Sequence[int]) -> None:
    """Rewrite the read-model rows of ``ids`` from what the session holds now (flushed), in the
    caller's transaction: the caller commits the figures and their copy together."""
    if not ids:
        return
    session.flush()
    drop(session, ids)
    rows = build(session, ids)
    if rows:
        session.execute(insert(LeaderboardFigures), rows)


def drop(session: Session, ids: Sequence[int]) -> None:
    """Remove the read-model rows of ``ids`` (a re-run, a dropped entry)."""
    session.execute(delete(LeaderboardFigures).where(LeaderboardFigures.submission_id.in_(ids)))
