"""Real shards on an inline worker: the counts they leave for progress and throughput, and a
cancel that arrives while a shard computes, logged and recorded as "cancelled"."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from models.core.settings import Settings
from models.db.entities import ShardDispatch, StageShard, Submission
from models.db.states import SubmissionState
from models.runs import progress
from models.runs.estimates import fleet_rates
from models.stages import inputs
from tests.support.workers import (
    CancelOnFirstForward,
    create_submission,
    manifest,
    tiny_model,
    weights_bytes,
)
from workers.app import app
from workers.names import VALIDATE

S = SubmissionState
#: The tiny benchmark: 2 test sets × 2 images, 1-image shards, n0 = 4 + n = 16 samples each.
PER_IMAGE = 20


def _submit(session: Session, settings: Settings, tmp_path: Path) -> int:
    weights = weights_bytes(tiny_model(), tmp_path / "upload")
    sid = create_submission(session, settings, weights=weights, manifest_doc=manifest())
    app.send_task(VALIDATE, args=[sid])
    return sid


def test_recorded_shards_leave_their_counts_and_the_fleet_throughput(
    settings, session, benchmark, worker, tmp_path
):
    sid = _submit(session, settings, tmp_path)
    worker.run_all()
    rows = session.scalars(
        select(ShardDispatch).where(ShardDispatch.submission_id == sid)
    ).all()  # fmt: skip
    assert len(rows) == 4
    assert all((r.images_done, r.samples_done) == (1, PER_IMAGE) for r in rows)
    assert all(r.claimed_by is None and r.started_at <= r.updated_at for r in rows)
    recorded = session.scalars(select(StageShard).where(StageShard.submission_id == sid)).all()
    seconds = sum(r.seconds for r in recorded)
    rate = fleet_rates(session, ["certification"])["certification"]
    assert rate.samples_per_second == pytest.approx(4 * PER_IMAGE / seconds)
    assert rate.images_per_second == pytest.approx(4 / seconds)
    report = progress.report(session, sid, settings=settings)
    assert report.state == S.FINISHED and report.fraction == 1.0
    assert (report.samples_done, report.samples_total) == (80, 80)
    assert report.throughput is not None
    assert report.throughput.samples_per_second == pytest.approx(rate.samples_per_second)
    assert report.eta_seconds is None and report.eta_basis == "no ETA: the submission is finished"


def test_a_cancel_while_a_shard_runs_is_logged_and_recorded_as_cancelled(
    settings, session, benchmark, worker, tmp_path, monkeypatch, caplog
):
    sid = _submit(session, settings, tmp_path)
    worker.run_next()  # validated, 4 shards queued
    message = worker.take()
    assert message is not None and message.args[1:] == ["certification", "clean", 0]
    wrapped = CancelOnFirstForward(tiny_model(), settings, sid)
    monkeypatch.setattr(inputs, "model_for", lambda item, device: wrapped)
    with caplog.at_level(logging.INFO, logger="workers.tasks"):
        outcome = worker.execute(message)
    sentence = (
        f"certification shard 0 of 'clean' of submission {sid} stopped after 1 of 1 image(s): "
        f"submission {sid} was cancelled (cancelled by alice)"
    )
    assert outcome == f"cancelled: {sentence}"
    logged = [r.getMessage() for r in caplog.records if r.name == "workers.tasks"]
    assert any(line.startswith("cancelled on ") and line.endswith(sentence) for line in logged)
    assert not any("lease" in line for line in logged)
    row = session.get(ShardDispatch, (sid, "certification", "clean", 0), populate_existing=True)
    assert row.claimed_by is None  # released
    assert row.history[-1] | {"at": "", "worker": ""} == {
        "at": "", "worker": "", "outcome": "cancelled", "images_done": 1,
        "message": f"submission {sid} was cancelled (cancelled by alice)",
    }  # fmt: skip
    session.expire_all()
    assert session.get(Submission, sid).state == S.CANCELLED
    assert session.scalars(select(StageShard).where(StageShard.submission_id == sid)).all() == []
    assert all(str(worker.execute(m)).startswith("skipped") for m in iter(worker.take, None))
