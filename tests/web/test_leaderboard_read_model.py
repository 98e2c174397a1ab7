"""The leaderboard's read model (issue 27 §1): a page is served from ``leaderboard_rows`` with
Core rows, and shows exactly what the per-figure ORM path showed, for entries finished before a
stage was added (figures missing) and after; its cost does not grow with the page size."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Engine, delete, event, select
from sqlalchemy.orm import Session

from api.schemas.leaderboard import LeaderboardPublic, Metrics
from api.schemas.zoo import WeightsLinkPublic
from models.boards import leaderboard as lb
from models.catalog.benchmarks import get_benchmark
from models.db.base import Base
from models.db.engine import session_scope
from models.db.entities import LeaderboardEntry, LeaderboardFigures, Submission, User
from tests.support.web import Site

MIGRATION = (
    Path(__file__).resolve().parents[2] / "migrations/versions/0011_leaderboard_read_model.py"
)


def _old_row(session: Session, rank: int, submission_id: int) -> dict[str, Any]:
    """A row as the code before the read model built it: ORM entry (its figures one
    ``metric_values`` object each), submission, artifact manifest and owner."""
    entry = session.get_one(LeaderboardEntry, submission_id)
    submission = session.get_one(Submission, submission_id)
    metadata = submission.artifact.manifest.get("metadata", {})
    weights = WeightsLinkPublic.of(submission)
    return {
        "rank": rank,
        "submission_id": submission.id,
        "model_name": submission.model_name,
        "owner": session.get_one(User, submission.user_id).name,
        "authors": list(metadata.get("authors") or []),
        "paper_url": metadata.get("paper_url"),
        "code_url": metadata.get("code_url"),
        "architecture": submission.architecture,
        "sigma": submission.sigma,
        "extra_data": submission.extra_data,
        "venue": submission.venue,
        "is_baseline": submission.is_baseline,
        "flagged": submission.flagged,
        "flag_reason": submission.flag_reason,
        "submitted_at": submission.created_at,
        "finished_at": entry.finished_at,
        "protocol_version": entry.protocol_version,
        "metrics": Metrics.of(entry).model_dump(),
        "weights": None if weights is None else weights.model_dump(),
    }


def _pages(session: Session) -> Iterator[tuple[str, LeaderboardPublic]]:
    """Every benchmark's whole board, as the public sees it."""
    for name in ("webclean", "webbands", "webf", "webup"):
        bench = get_benchmark(session, name)
        query = lb.LeaderboardQuery(limit=200)
        yield name, LeaderboardPublic.of(lb.leaderboard(session, bench, query, viewer=None))


def _compare(session: Session) -> int:
    compared = 0
    for name, page in _pages(session):
        assert page.rows, f"{name} has entries"
        for row in page.rows:
            new = row.model_dump(exclude={"effective_robustness", "tied_with", "tie"})
            assert new == _old_row(session, row.rank, row.submission_id), name
            compared += 1
    return compared


def test_read_model_shows_what_the_figure_rows_showed(site: Site) -> None:
    with session_scope(site.settings) as session:
        webup = get_benchmark(session, "webup")
        before = [
            e for e in lb.leaderboard(session, webup, lb.LeaderboardQuery(), viewer=None).rows
        ]
        new_keys = {s.key for s in lb.benchmark_metric_specs(webup)} - {
            k for r in before for k in r.figures
        }
        assert new_keys, "entries finished before the upgrade lack the new stage's figures"
        assert _compare(session) >= 6


def test_a_missing_read_model_row_is_built_from_the_figures(site: Site) -> None:
    """An entry without its row (written by code that bypassed the writer) still shows the
    same figures, built from ``metric_values``."""
    with session_scope(site.settings) as session:
        sid = next(iter(site.seeded.entries["webclean"].values()))
        kept = session.get_one(LeaderboardFigures, sid)
        saved = {"figures": dict(kept.figures), "card": dict(kept.card)}
        session.execute(delete(LeaderboardFigures).where(LeaderboardFigures.submission_id == sid))
        session.commit()
        try:
            _compare(session)
        finally:
            session.add(LeaderboardFigures(submission_id=sid, benchmark_id=kept.benchmark_id,
                                           **saved))  # fmt: skip
            session.commit()


def test_the_migration_backfill_writes_what_the_merge_wrote(site: Site) -> None:
    """Migration 0011 rebuilds, from the stored figures and artifacts, the rows the merge and
    the interval backfill wrote."""
    spec = importlib.util.spec_from_file_location("migration_0011", MIGRATION)
    assert spec is not None and spec.loader is not None
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    table = LeaderboardFigures.__table__
    with session_scope(site.settings) as session:
        engine = session.get_bind()
    with engine.connect() as connection:
        transaction = connection.begin()
        try:
            written = {
                r.submission_id: (r.figures, r.card) for r in connection.execute(select(table))
            }
            connection.execute(delete(table))
            migration.backfill(connection)
            rebuilt = {
                r.submission_id: (r.figures, r.card) for r in connection.execute(select(table))
            }
        finally:
            transaction.rollback()
    assert len(written) >= 6 and rebuilt == written


@contextmanager
def _counting() -> Iterator[dict[str, int]]:
    """SQL statements executed and ORM objects loaded (and their classes) while the block
    runs."""
    seen: dict[str, Any] = {"statements": 0, "objects": 0, "classes": set()}

    def statement(*_: Any) -> None:
        seen["statements"] += 1

    def loaded(target: Any, *_: Any) -> None:
        seen["objects"] += 1
        seen["classes"].add(type(target).__name__)

    event.listen(Engine, "before_cursor_execute", statement)
    event.listen(Base, "load", loaded, propagate=True)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", statement)
        event.remove(Base, "load", loaded)


def test_a_page_costs_the_same_for_one_row_and_for_all(client: TestClient, site: Site) -> None:
    """No N+1: the statements run and the ORM objects loaded for a REST or web page do not grow
    with its rows (the per-figure path loaded ~33 objects per row)."""
    client.cookies.clear()
    entries = len(site.seeded.entries["webclean"])
    assert entries >= 3
    costs = {}
    for path in ("/api/v1/leaderboards/webclean", "/leaderboards/webclean"):
        for limit in (1, entries):
            param = "limit" if path.startswith("/api") else "per_page"
            client.get(path, params={param: limit})  # warm the per-process caches
            with _counting() as seen:
                response = client.get(path, params={param: limit})
            assert response.status_code == 200, response.text
            costs[path, limit] = dict(seen)
    for path in ("/api/v1/leaderboards/webclean", "/leaderboards/webclean"):
        assert costs[path, 1] == costs[path, entries], costs
    for cost in costs.values():  # the rows are Core rows: no entry, submission or figure objects
        assert not cost["classes"] & {"LeaderboardEntry", "MetricValue", "Submission"}, cost


def test_sorting_by_a_figure_puts_unmeasured_entries_last_on_every_page(site: Site) -> None:
    """Pages walk the figure's index for the measured entries, then the entries without the
    figure (finished before its stage was added) by id, in either order, at any offset."""
    with session_scope(site.settings) as session:
        bench = get_benchmark(session, "webclean")
        key = next(s.key for s in lb.benchmark_metric_specs(bench) if s.key.startswith("pd_acc"))
        everything = lb.leaderboard(session, bench, lb.LeaderboardQuery(limit=200), viewer=None)
        figures = {r.submission_id: r.figures.get(key) for r in everything.rows}
        assert None in figures.values() and len({v for v in figures.values()}) > 2
        for order in ("desc", "asc"):
            sign = -1 if order == "desc" else 1
            expected = sorted(
                figures, key=lambda i: (figures[i] is None, sign * (figures[i] or 0), i)
            )
            paged = [
                row.submission_id
                for offset in range(len(figures) + 1)
                for row in lb.leaderboard(
                    session,
                    bench,
                    lb.LeaderboardQuery(sort=key, order=order, offset=offset, limit=1),
                    viewer=None,
                ).rows
            ]
            whole = lb.leaderboard(
                session, bench, lb.LeaderboardQuery(sort=key, order=order, limit=200), viewer=None
            )
            assert paged == [r.submission_id for r in whole.rows] == expected, order


def test_entries_without_records_get_no_tie_mark_rather_than_an_error() -> None:
    """An entry whose certification records are not on this server (here: none stored) is
    left unmarked on every sort key with paired tests (a 500 on ``sort=abstain_rate`` before)."""
    from models.boards import comparisons

    a, b = (
        comparisons.Entry(submission_id=i, records={}, bands={}, terms_path=None) for i in (1, 2)
    )
    for sort in ("macr", "abstain_rate", "clean_accuracy", "cert_acc_050", "band_low"):
        key = comparisons.terms_key(sort)
        assert key is not None and comparisons.paired_test(a, b, key) is None, sort
