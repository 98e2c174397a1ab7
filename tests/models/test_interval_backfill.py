"""``certbench results backfill-intervals``: an entry aggregated before intervals existed gets
exactly what a fresh aggregate stores, from its records alone; its tie marks work meanwhile from
the records (no image-terms file)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import typer
from sqlalchemy import delete, select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from models.boards import comparisons
from models.boards.commands import register
from models.boards.interval_backfill import entries_to_backfill
from models.core.settings import Settings, get_settings
from models.db.entities import MetricValue, StageResult, Submission
from models.stages.certification.intervals import TERMS_UNIT, bound_keys
from models.submissions import storage
from tests.support.service_factories import finished_submission, load_tiny, make_user


def _invoke(*args: str):
    """Run ``certbench results ...`` on a fresh app with only this plugin, as the CLI mounts it."""
    app = typer.Typer()
    app.callback()(lambda: None)
    register(app)
    return CliRunner().invoke(app, ["results", *args])


@pytest.fixture
def cli_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The command reads CERTBENCH_* like a deployment: point it at this test's database."""
    monkeypatch.setenv("CERTBENCH_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("CERTBENCH_DATABASE_URL", settings.database_url)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def _stored(session: Session, sid: int) -> tuple[dict, dict]:
    session.expire_all()
    bounds = {
        m.key: m.value
        for m in session.scalars(select(MetricValue).where(MetricValue.submission_id == sid))
        if m.key in bound_keys()
    }
    summaries = {
        r.unit: r.summary.get("intervals")
        for r in session.scalars(select(StageResult).where(StageResult.submission_id == sid))
    }
    return bounds, summaries


def _forget_intervals(session: Session, settings: Settings, sid: int) -> None:
    """What an entry aggregated before this feature holds: no bounds, summaries, terms."""
    session.execute(
        delete(MetricValue).where(
            MetricValue.submission_id == sid, MetricValue.key.in_(bound_keys())
        )
    )
    for row in session.scalars(select(StageResult).where(StageResult.submission_id == sid)):
        row.summary = {k: v for k, v in row.summary.items() if k != "intervals"}
    session.commit()
    storage.resolve(
        settings.artifacts_dir, storage.test_set_records_relpath(sid, TERMS_UNIT)
    ).unlink()


def test_backfill_restores_what_the_aggregate_stored(session, settings, cli_env):
    bench = load_tiny(session, name="wide", size=40)
    user, _ = make_user(session, "carol")
    sids = [
        finished_submission(
            session, user=user, benchmark=bench, settings=settings, seed=s, quality=q, name=f"m{s}"
        )
        for s, q in ((1, 1.0), (2, 0.34))
    ]
    fresh = {sid: _stored(session, sid) for sid in sids}
    assert all(len(b) == len(bound_keys()) and all(s.values()) for b, s in fresh.values())
    for sid in sids:
        _forget_intervals(session, settings, sid)
    assert entries_to_backfill(session) == sids

    # Before the backfill, paired tests fall back to the records.
    entries = [
        comparisons.entry(session, session.get(Submission, s), settings=settings) for s in sids
    ]
    assert all(e.terms_path is None for e in entries)
    marks = comparisons.tie_marks([(1, entries[0]), (2, entries[1])], None, "macr")
    assert not marks[sids[1]].tied

    result = _invoke("backfill-intervals", "--benchmark", "wide")
    assert result.exit_code == 0, result.output
    assert "intervals stored for 2 entr" in result.output
    assert {sid: _stored(session, sid) for sid in sids} == fresh
    again = _invoke("backfill-intervals")
    assert "intervals stored for 0 entr" in again.output
    assert entries_to_backfill(session, force=True) == sids


def test_backfill_skips_an_entry_whose_records_are_gone(session, settings, cli_env):
    bench = load_tiny(session, name="wide", size=20)
    user, _ = make_user(session, "dave")
    sid = finished_submission(session, user=user, benchmark=bench, settings=settings, seed=4)
    _forget_intervals(session, settings, sid)
    row = session.scalars(select(StageResult).where(StageResult.submission_id == sid)).first()
    storage.resolve(settings.artifacts_dir, row.records_path).unlink()
    result = _invoke("backfill-intervals")
    assert result.exit_code == 0, result.output
    assert (
        f"skipped submission {sid}: records of test set {row.unit!r} are missing" in result.output
    )
    assert _stored(session, sid)[0] == {}
