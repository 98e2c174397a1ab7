"""A worker cut off past its lease cannot store its late result: the claim it held fences it off
(issue 36 §1, found by ``scripts/fleet-check``: a worker partitioned mid-shard for longer than
the lease came back after the heal and recorded the shard the reconciler had given away).

The real ``run_shard`` task runs in this process; when its computation ends, the world has moved
on as it does while a worker is partitioned: its claim lapsed and the shard went to ``w2``.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from models.core.settings import Settings
from models.db.base import utcnow
from models.db.engine import session_scope
from models.db.entities import ShardDispatch, StageShard
from models.runs import shards
from models.submissions import storage
from tests.support.workers import TEST_SETS, create_submission, manifest, tiny_model, weights_bytes
from workers import tasks
from workers.app import app
from workers.names import VALIDATE

KEY = ("certification", TEST_SETS[0], 0)


def _first_shard_message(session: Session, settings: Settings, worker, tmp_path: Path):
    weights = weights_bytes(tiny_model(), tmp_path / "upload")
    sid = create_submission(session, settings, weights=weights, manifest_doc=manifest())
    app.send_task(VALIDATE, args=[sid])
    worker.run_next()  # validate: every shard enqueued
    message = worker.take()
    assert tuple(message.args[1:]) == KEY
    return sid, message


def _taken_over_while_computing(monkeypatch: pytest.MonkeyPatch, settings: Settings, sid: int,
                                *, recorded_by_w2: bool) -> Path:  # fmt: skip
    """When the shard's computation returns, its claim has lapsed and w2 holds it (and, with
    ``recorded_by_w2``, has recorded it with its own records file). Returns the records path."""
    real = tasks._run_stage
    final = storage.resolve(settings.artifacts_dir, storage.shard_records_relpath(sid, KEY[1], 0))

    def run_stage(*args, **kwargs):
        output = real(*args, **kwargs)
        with session_scope(settings) as db:
            db.execute(
                update(ShardDispatch)
                .where(ShardDispatch.submission_id == sid, ShardDispatch.shard_index == 0,
                       ShardDispatch.unit == KEY[1])
                .values(claimed_by="w2/7", claimed_until=utcnow() + timedelta(seconds=60))
            )  # fmt: skip
            db.commit()
            if recorded_by_w2:
                final.parent.mkdir(parents=True, exist_ok=True)
                final.write_bytes(b"w2's records")
                spec = next(s for s in shards.plan(db, sid, settings=settings) if s.key == KEY)
                relpath = str(storage.shard_records_relpath(sid, KEY[1], 0))
                assert shards.record(
                    db, submission_id=sid, spec=spec, count=1, seconds=0.1,
                    records_path=relpath, worker="w2/7", settings=settings,
                )  # fmt: skip
        return output

    monkeypatch.setattr(tasks, "_run_stage", run_stage)
    return final


def test_a_late_result_after_the_claim_was_given_away_is_not_stored(
    settings, session, benchmark, worker, tmp_path, monkeypatch
):
    sid, message = _first_shard_message(session, settings, worker, tmp_path)
    final = _taken_over_while_computing(monkeypatch, settings, sid, recorded_by_w2=False)
    outcome = worker.execute(message)
    assert str(outcome).startswith("fenced:"), outcome
    assert "no longer holds its claim" in str(outcome) and "held by w2/7 now" in str(outcome)
    session.expire_all()
    assert session.scalars(select(StageShard).where(StageShard.submission_id == sid)).all() == []
    assert not final.exists()  # neither the row nor the file of the late result
    assert list(final.parent.glob("*.attempt")) == []
    row = session.get(ShardDispatch, (sid, *KEY))
    assert row.claimed_by == "w2/7"  # w2's claim is untouched
    assert row.history[-1]["outcome"] == "fenced"
    assert row.history[-1]["worker"].endswith(f"/{os.getpid()}")


def test_a_late_result_never_overwrites_the_records_of_the_worker_that_recorded_the_shard(
    settings, session, benchmark, worker, tmp_path, monkeypatch
):
    sid, message = _first_shard_message(session, settings, worker, tmp_path)
    final = _taken_over_while_computing(monkeypatch, settings, sid, recorded_by_w2=True)
    outcome = worker.execute(message)
    assert str(outcome).startswith("fenced:"), outcome
    assert final.read_bytes() == b"w2's records"
    session.expire_all()
    (row,) = session.scalars(select(StageShard).where(StageShard.submission_id == sid)).all()
    assert row.worker == "w2/7"


def test_record_refuses_a_lapsed_claim_nobody_took_yet(settings, session, benchmark, tmp_path):
    """A lease that ran out is no authority, even before the reconciler acted on it."""
    weights = weights_bytes(tiny_model(), tmp_path / "upload")
    sid = create_submission(session, settings, weights=weights, manifest_doc=manifest())
    spec = next(s for s in shards.plan(session, sid, settings=settings) if s.key == KEY)
    assert shards.claim(session, sid, spec, worker="w1/1", settings=settings) is None
    session.execute(update(ShardDispatch).values(claimed_until=utcnow() - timedelta(seconds=1)))
    session.commit()
    attempt = tmp_path / "attempt.parquet"
    attempt.write_bytes(b"late")
    with pytest.raises(shards.ClaimLostError, match="its lease on the claim ran out"):
        shards.record(session, submission_id=sid, spec=spec, count=1, seconds=0.1,
                      records_path="x/shard.parquet", worker="w1/1", settings=settings,
                      attempt=attempt)  # fmt: skip
    assert not attempt.exists()
