"""The worker-facing persistence functions, on SQLite and (integration) PostgreSQL."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from certbench.smoothing.records import read_table
from models.boards.leaderboard import certification_results
from models.core.errors import InvalidTransitionError, NotFoundError, StorageError
from models.core.settings import Settings
from models.db.base import utcnow
from models.db.engine import session_scope
from models.db.entities import (
    LeaderboardEntry,
    StageResult,
    StageShard,
    Submission,
    SubmissionEvent,
)
from models.db.states import ACTIVE_STATES, Reason, SubmissionState
from models.runs import shards as shard_store
from models.runs.results import complete_submission
from models.stages.base import ShardSpec
from models.stages.work import get_work_item
from models.submissions import lifecycle as pipeline
from models.submissions import storage
from models.submissions.intake import create_submission
from tests.support.service_factories import load_tiny, make_user, record_shard, run_pipeline, upload

S = SubmissionState


@pytest.fixture
def submission_id(session: Session, settings: Settings) -> int:
    benchmark = load_tiny(session)
    user, _ = make_user(session, "alice")
    return create_submission(
        session, user=user, benchmark=benchmark, upload=upload(), settings=settings
    ).id


def to_running(session: Session, sid: int, settings: Settings) -> None:
    for source, target in ((S.SUBMITTED, S.VALIDATING), (S.VALIDATING, S.QUEUED),
                           (S.QUEUED, S.RUNNING)):  # fmt: skip
        assert pipeline.transition(
            session, sid, from_states={source}, to_state=target, settings=settings
        )


def test_transition_is_compare_and_set(session: Session, settings: Settings, submission_id: int):
    assert pipeline.transition(
        session, submission_id, from_states={S.SUBMITTED}, to_state=S.VALIDATING, settings=settings
    )
    # A second worker trying the same move loses quietly.
    assert not pipeline.transition(
        session, submission_id, from_states={S.SUBMITTED}, to_state=S.VALIDATING, settings=settings
    )
    submission = pipeline.get_submission(session, submission_id)
    assert submission.state == S.VALIDATING
    assert submission.lease_expires_at is not None
    assert submission.lease_expires_at > utcnow() + timedelta(seconds=settings.lease_seconds - 60)
    events = session.scalars(
        select(SubmissionEvent).where(SubmissionEvent.submission_id == submission_id)
    ).all()
    assert [(e.from_state, e.to_state) for e in events] == [
        (None, S.SUBMITTED),
        (S.SUBMITTED, S.VALIDATING),
    ]


def test_illegal_transition_raises(session: Session, submission_id: int):
    with pytest.raises(InvalidTransitionError, match="legal targets"):
        pipeline.transition(session, submission_id, from_states={S.SUBMITTED}, to_state=S.FINISHED)
    with pytest.raises(InvalidTransitionError, match="settings"):
        pipeline.transition(
            session, submission_id, from_states={S.SUBMITTED}, to_state=S.VALIDATING
        )
    assert pipeline.get_state(session, submission_id) == S.SUBMITTED


def test_unknown_submission(session: Session, settings: Settings):
    with pytest.raises(NotFoundError, match="4242"):
        get_work_item(session, 4242, settings=settings)


def test_work_item_describes_the_job(session: Session, settings: Settings, submission_id: int):
    item = get_work_item(session, submission_id, settings=settings)
    assert item.benchmark == "tiny" and item.num_classes == 10
    assert (item.n0, item.n, item.alpha, item.sigma) == (4, 16, 0.001, 0.25)
    assert item.protocol_version == "test-v1"
    assert item.weights_path is not None and item.weights_path.read_bytes() == upload().weights
    assert [t.name for t in item.test_sets] == ["set0", "set1"]
    first = item.test_sets[0]
    assert (first.source, first.config, first.subset_skip, first.num_images) == (
        "certbench/tiny",
        "set0",
        2,
        3,
    )
    assert item.manifest["smoothing"]["sigma"] == 0.25


def test_record_shard_is_idempotent(session: Session, settings: Settings, submission_id: int):
    to_running(session, submission_id, settings)
    plan = shard_store.plan(session, submission_id, settings=settings)
    assert [(p.unit, p.start, p.stop) for p in plan] == [("set0", 0, 3), ("set1", 0, 3)]
    assert record_shard(session, submission_id, plan[0], settings=settings)
    assert not record_shard(session, submission_id, plan[0], settings=settings)
    shards = shard_store.recorded(session, submission_id)
    assert len(shards) == 1
    submission = pipeline.get_submission(session, submission_id)
    assert (submission.shards_done, submission.shards_total, submission.progress) == (1, 2, 0.5)
    assert [m.unit for m in shard_store.missing(session, submission_id, settings=settings)
            ] == ["set1"]  # fmt: skip


def test_concurrent_duplicate_shards_store_one(
    session: Session, settings: Settings, submission_id: int
):
    to_running(session, submission_id, settings)
    spec = shard_store.plan(session, submission_id, settings=settings)[0]
    outcomes: list[bool] = []

    def deliver() -> None:
        with session_scope(settings) as own:
            outcomes.append(record_shard(own, submission_id, spec, settings=settings))

    threads = [threading.Thread(target=deliver) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == [False, False, False, True]
    count = session.scalar(select(func.count()).select_from(StageShard))
    assert count == 1


def test_record_shard_needs_the_file(session: Session, settings: Settings, submission_id: int):
    to_running(session, submission_id, settings)
    with pytest.raises(StorageError, match="write it before"):
        shard_store.record(
            session,
            submission_id=submission_id,
            spec=ShardSpec("certification", "set0", 0, 0, 3),
            count=3,
            seconds=0.1,
            records_path="records/x/none.parquet",
            settings=settings,
        )


def test_complete_submission_writes_results(
    session: Session, settings: Settings, submission_id: int
):
    run_pipeline(session, submission_id, settings=settings, quality=2 / 3)
    submission = pipeline.get_submission(session, submission_id)
    assert submission.state == S.FINISHED and submission.progress == 1.0
    assert submission.finished_at is not None and submission.reason == Reason.COMPLETED
    results = certification_results(session, submission_id)
    assert len(results) == 2
    for result in results:
        # positions 0,1,2: correct iff position % 3 < 2 → 2 of 3 images, radius 0.25+0.5·2/3
        assert result.count == 3
        assert result.clean_accuracy == pytest.approx(2 / 3)
        assert result.acr == pytest.approx(2 / 3 * (0.25 + 1 / 3))
        assert result.abstain_rate == pytest.approx(1 / 3)
        assert result.certified_accuracy["0.5"] == pytest.approx(2 / 3)
        assert result.certified_accuracy["1"] == 0.0
        assert result.protocol_version == "test-v1"
        merged = read_table(storage.resolve(settings.artifacts_dir, result.records_path))
        assert merged.num_rows == 3
    entry = session.get(LeaderboardEntry, submission_id)
    assert entry is not None
    assert entry.macr == pytest.approx(results[0].acr)
    assert entry.band_low == pytest.approx(results[0].acr)
    assert entry.band_mid is None
    assert entry.test_sets == 2 and entry.count == 6
    # Idempotent: a redelivered aggregate finds the results stored, not a second row.
    assert not complete_submission(session, submission_id, settings=settings)  # finished already
    again = certification_results(session, submission_id)
    assert [r.id for r in again] == [r.id for r in results]


def test_aggregate_refuses_missing_shards(session: Session, settings: Settings, submission_id: int):
    to_running(session, submission_id, settings)
    plan = shard_store.plan(session, submission_id, settings=settings)
    record_shard(session, submission_id, plan[0], settings=settings)
    with pytest.raises(StorageError, match="missing shards"):
        complete_submission(session, submission_id, settings=settings)
    assert pipeline.get_state(session, submission_id) == S.RUNNING


def test_cancel_stops_heartbeat_and_completion(
    session: Session, settings: Settings, submission_id: int
):
    to_running(session, submission_id, settings)
    plan = shard_store.plan(session, submission_id, settings=settings)
    for spec in plan:
        record_shard(session, submission_id, spec, settings=settings)
    assert pipeline.heartbeat(session, submission_id, settings=settings)
    assert pipeline.transition(
        session, submission_id, from_states=ACTIVE_STATES, to_state=S.CANCELLED
    )
    assert pipeline.is_cancelled(session, submission_id)
    assert not pipeline.should_continue(session, submission_id)
    assert not pipeline.heartbeat(session, submission_id, settings=settings)
    assert not complete_submission(session, submission_id, settings=settings)
    assert session.get(LeaderboardEntry, submission_id) is None
    assert pipeline.get_state(session, submission_id) == S.CANCELLED


def test_heartbeat_extends_the_lease(session: Session, settings: Settings, submission_id: int):
    to_running(session, submission_id, settings)
    before = pipeline.get_submission(session, submission_id).lease_expires_at
    assert pipeline.heartbeat(session, submission_id, settings=settings, worker="gpu0")
    session.expire_all()
    after = pipeline.get_submission(session, submission_id)
    assert after.lease_expires_at >= before
    assert after.worker == "gpu0"


def test_reject_deletes_the_weights(session: Session, settings: Settings, submission_id: int):
    path = get_work_item(session, submission_id, settings=settings).weights_path
    assert path is not None and path.is_file()
    assert pipeline.transition(
        session, submission_id, from_states={S.SUBMITTED}, to_state=S.VALIDATING, settings=settings
    )
    assert pipeline.reject(
        session,
        submission_id,
        reason=Reason.STATE_DICT_MISMATCH.value,
        message="missing keys",
        settings=settings,
    )
    assert not path.exists()
    submission = pipeline.get_submission(session, submission_id)
    assert submission.state == S.REJECTED and submission.reason == "state_dict_mismatch"
    assert submission.artifact.weights_path is None
    with pytest.raises(InvalidTransitionError, match="weights were deleted"):
        pipeline.reset_for_rerun(session, submission_id, fresh=False, settings=settings)


def test_nobody_sees_a_rejected_submission_whose_weights_are_still_on_disk(
    session: Session, settings: Settings, submission_id: int, monkeypatch: pytest.MonkeyPatch
):
    """The e2e test once read 'rejected' between the state's commit and the file's deletion."""
    path = get_work_item(session, submission_id, settings=settings).weights_path
    assert pipeline.transition(
        session, submission_id, from_states={S.SUBMITTED}, to_state=S.VALIDATING, settings=settings
    )
    seen: list[tuple[SubmissionState, bool]] = []
    real_lock = pipeline.artifacts.lock

    def lock_and_look(*args, **kwargs):
        """What another client sees just before the file is deleted."""
        with session_scope(settings) as other:
            seen.append((pipeline.get_state(other, submission_id), path.exists()))
        return real_lock(*args, **kwargs)

    monkeypatch.setattr(pipeline.artifacts, "lock", lock_and_look)
    assert pipeline.reject(
        session, submission_id, reason=Reason.NON_FINITE_OUTPUT.value, message="nan",
        settings=settings,
    )  # fmt: skip
    assert seen == [(S.VALIDATING, True)]
    assert not path.exists()
    with session_scope(settings) as other:
        assert pipeline.get_state(other, submission_id) == S.REJECTED


def test_rerun_resumes_or_starts_fresh(session: Session, settings: Settings, submission_id: int):
    run_pipeline(session, submission_id, settings=settings)
    assert pipeline.reset_for_rerun(session, submission_id, fresh=False, settings=settings)
    submission = pipeline.get_submission(session, submission_id)
    assert submission.state == S.SUBMITTED and submission.attempt == 1
    assert session.get(LeaderboardEntry, submission_id) is None
    assert len(shard_store.recorded(session, submission_id)) == 2
    assert shard_store.missing(session, submission_id, settings=settings) == []
    assert pipeline.transition(session, submission_id, from_states={S.SUBMITTED},
                               to_state=S.CANCELLED)  # fmt: skip
    assert pipeline.reset_for_rerun(session, submission_id, fresh=True, settings=settings)
    assert shard_store.recorded(session, submission_id) == []
    records = storage.resolve(settings.artifacts_dir, storage.submission_records_dir(submission_id))
    assert not records.exists()
    assert session.scalar(select(func.count()).select_from(StageResult)) == 0
    assert pipeline.get_submission(session, submission_id).attempt == 2


def test_active_submission_cannot_be_rerun(session: Session, settings: Settings, submission_id):
    assert not pipeline.reset_for_rerun(session, submission_id, fresh=False, settings=settings)
    assert session.get(Submission, submission_id).state == S.SUBMITTED
