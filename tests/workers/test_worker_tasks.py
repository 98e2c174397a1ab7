"""The pipeline tasks, driven message by message: finish, redelivery, resume, cancel, reject."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from certbench.data.image_set import Subset
from certbench.data.sources import load_images
from certbench.errors import DataSourceError, DataUnavailableError
from certbench.smoothing.core import certify
from certbench.smoothing.records import read_records
from models.benchmarks.sources import TestSetSpec
from models.boards.leaderboard import certification_results
from models.core.settings import Settings
from models.db.entities import Artifact, LeaderboardEntry, StageResult, StageShard, Submission
from models.db.states import Reason, SubmissionState
from models.stages import inputs
from models.submissions import lifecycle as pipeline
from models.submissions import storage
from tests.support.workers import (
    CIFAR10_CLASSES,
    TEST_SETS,
    create_submission,
    manifest,
    non_finite_model,
    overflowing_model,
    revealed_seed,
    tiny_model,
    weights_bytes,
    write_hub_folder,
)
from workers import device
from workers.app import app
from workers.names import AGGREGATE, VALIDATE
from workers.names import RUN_SHARD as CERTIFY_SHARD
from workers.tasks import remove_stale_partials

S = SubmissionState


def _submit(session: Session, settings: Settings, tmp_path: Path, model=None, **changes) -> int:
    weights = weights_bytes(model or tiny_model(), tmp_path / "upload")
    sid = create_submission(session, settings, weights=weights, manifest_doc=manifest(**changes))
    app.send_task(VALIDATE, args=[sid])
    return sid


def _submission(session: Session, sid: int) -> Submission:
    session.expire_all()
    return session.get(Submission, sid)


def _shard_rows(session: Session, sid: int) -> int:
    return session.scalar(
        select(func.count()).select_from(StageShard).where(StageShard.submission_id == sid)
    )


def test_submission_goes_from_submitted_to_finished(settings, session, benchmark, worker, tmp_path):
    sid = _submit(session, settings, tmp_path)
    first = worker.run_next()
    assert first == "4 shard(s) enqueued"  # 2 test sets x 2 images / shard size 1
    assert _submission(session, sid).state == S.QUEUED
    assert [m.name for m in worker.pending()] == [CERTIFY_SHARD] * 4
    worker.run_all()
    submission = _submission(session, sid)
    assert submission.state == S.FINISHED, submission.message
    assert submission.progress == 1.0 and submission.shards_done == 4
    assert [m.name for m, _ in worker.ran][-1] == AGGREGATE
    results = certification_results(session, sid)
    assert sorted(r.test_set.name for r in results) == sorted(TEST_SETS)
    assert all(r.count == 2 for r in results)
    entry = session.get(LeaderboardEntry, sid)
    assert entry is not None and entry.test_sets == 2 and entry.count == 4
    assert entry.macr == sum(r.acr for r in results) / 2


def test_sharded_records_equal_one_unsharded_certify(
    settings, session, benchmark, worker, tmp_path, dataset
):
    model = tiny_model(seed=3)
    sid = _submit(session, settings, tmp_path, model=model)
    worker.run_all()
    assert _submission(session, sid).state == S.FINISHED
    seed = revealed_seed(session, sid)  # the run's secret seed, not the benchmark's 7
    for name in TEST_SETS:
        merged = read_records(
            storage.resolve(settings.artifacts_dir, storage.test_set_records_relpath(sid, name))
        )
        images = load_images(dataset, config=name, subset=Subset(skip=2))
        reference = certify(
            model.eval(),
            images.as_float(),
            images.labels,
            sigma=0.25,
            n0=4,
            n=16,
            alpha=0.001,
            seed=seed,
            indices=images.indices,
            test_set=f"{name}/test",  # the noise stream key of `certbench certify`
            device="cpu",
        )
        assert [r.index for r in merged] == [0, 2]

        def strip(records):
            return [(r.index, r.label, r.prediction, r.n_a, r.n_y, r.radius) for r in records]

        assert strip(merged) == strip(reference)


def test_redelivered_shard_returns_quietly_and_duplicates_nothing(
    settings, session, benchmark, worker, tmp_path
):
    sid = _submit(session, settings, tmp_path)
    worker.run_next()
    shard_message = worker.take()
    worker.execute(shard_message)
    path = storage.resolve(
        settings.artifacts_dir, storage.shard_records_relpath(sid, TEST_SETS[0], 0)
    )
    written = path.stat().st_mtime_ns
    assert worker.execute(shard_message) == "already recorded"
    assert path.stat().st_mtime_ns == written
    assert _shard_rows(session, sid) == 1
    worker.run_all()
    assert _submission(session, sid).state == S.FINISHED
    assert _shard_rows(session, sid) == 4
    # A late duplicate of a finished run's shard and aggregate change nothing either.
    assert worker.execute(shard_message).startswith("skipped")
    worker.execute(type(shard_message)(AGGREGATE, [sid], "certbench.control"))
    assert _shard_rows(session, sid) == 4
    assert session.scalar(select(func.count()).select_from(StageResult)) == 2


def test_lost_messages_resume_from_finished_shards(settings, session, benchmark, worker, tmp_path):
    sid = _submit(session, settings, tmp_path)
    worker.run_next()
    worker.run_next()  # one shard done
    assert worker.purge() == 3  # the broker lost the other shard messages
    done = (
        storage.resolve(settings.artifacts_dir, storage.shard_records_relpath(sid, TEST_SETS[0], 0))
        .stat()
        .st_mtime_ns
    )
    # The validate message is delivered again (e.g. Redis visibility timeout): only the missing
    # shards are dispatched and the finished one is not recomputed.
    app.send_task(VALIDATE, args=[sid])
    assert worker.run_next() == "3 shard(s) enqueued"
    worker.run_all()
    assert _submission(session, sid).state == S.FINISHED
    assert _shard_rows(session, sid) == 4
    assert (
        storage.resolve(settings.artifacts_dir, storage.shard_records_relpath(sid, TEST_SETS[0], 0))
        .stat()
        .st_mtime_ns
        == done
    )


def test_cancel_stops_further_shards(settings, session, benchmark, worker, tmp_path):
    sid = _submit(session, settings, tmp_path)
    worker.run_next()
    worker.run_next()
    assert pipeline.transition(
        session,
        sid,
        from_states={S.RUNNING},
        to_state=S.CANCELLED,
        reason=Reason.CANCELLED_BY_USER.value,
    )
    worker.run_all()
    assert all(str(outcome).startswith("skipped") for _, outcome in worker.ran[2:])
    assert _submission(session, sid).state == S.CANCELLED
    assert _shard_rows(session, sid) == 1
    assert session.scalar(select(func.count()).select_from(StageResult)) == 0


@pytest.mark.parametrize(
    ("model", "reason"),
    [(overflowing_model, Reason.NON_FINITE_OUTPUT),
     (lambda: non_finite_model(float("nan")), Reason.NON_FINITE_WEIGHTS)],
    ids=["infinite-outputs", "nan-weights"],
)  # fmt: skip
def test_a_model_with_non_finite_outputs_or_weights_is_rejected_and_its_weights_deleted(
    settings, session, benchmark, worker, tmp_path, model, reason
):
    sid = _submit(session, settings, tmp_path, model=model())
    assert worker.run_next() == f"rejected: {reason}"
    assert worker.run_all() == 0
    submission = _submission(session, sid)
    assert submission.state == S.REJECTED
    assert submission.reason == reason
    assert "not finite" in submission.message
    artifact = session.get(Artifact, submission.artifact_id)
    assert artifact.weights_path is None
    assert not any((settings.artifacts_dir / "weights").rglob("*.safetensors"))
    assert not (settings.artifacts_dir / storage.submission_records_dir(sid)).exists()


def test_missing_weights_fail_with_artifact_missing(settings, session, benchmark, worker, tmp_path):
    sid = _submit(session, settings, tmp_path)
    artifact = session.get(Artifact, _submission(session, sid).artifact_id)
    storage.resolve(settings.artifacts_dir, artifact.weights_path).unlink()
    assert worker.run_next() == "failed: artifact missing"
    submission = _submission(session, sid)
    assert submission.state == S.FAILED and submission.reason == Reason.ARTIFACT_MISSING


def test_dataset_smaller_than_definition_fails_the_run(
    settings, session, benchmark, worker, tmp_path, dataset
):
    sid = _submit(session, settings, tmp_path)
    worker.run_next()
    # The definition promises 2 images per test set; replace one test set by a 1-image one.
    write_hub_folder(
        dataset,
        TEST_SETS[1],
        np.zeros((1, 3, 32, 32), np.uint8),
        [0],
        class_names=CIFAR10_CLASSES,
    )
    inputs.images_for.cache_clear()
    worker.run_all()
    submission = _submission(session, sid)
    assert submission.state == S.FAILED
    assert submission.reason == Reason.DATASET_UNAVAILABLE
    assert "definition says 2" in submission.message
    assert "(local/tiny, config" in submission.message and str(dataset) not in submission.message


def test_data_missing_on_a_worker_fails_with_the_operators_fix(
    settings, session, benchmark, worker, tmp_path, dataset
):
    """With the intake check off, a worker that lacks the data fails the run with what the
    operator does (not the command line's "pass a local folder"), naming no local path."""
    sid = _submit(session, settings, tmp_path)
    worker.run_next()  # validated while the data was there
    shutil.rmtree(dataset)
    inputs.images_for.cache_clear()
    worker.run_all()
    submission = _submission(session, sid)
    assert submission.state == S.FAILED
    assert submission.reason == Reason.DATASET_UNAVAILABLE
    message = submission.message
    assert (
        "the data is not on this worker: folder …/tiny-dataset (local/tiny) is missing" in message
    )
    assert "copy the data to the definition's `folder`" in message
    assert "hf download local/tiny --repo-type dataset" in message
    assert "re-run the submission" in message
    assert "pass a local folder" not in message and str(tmp_path) not in message


def test_hub_data_out_of_reach_on_a_worker_gets_the_operators_fix(monkeypatch):
    """A Hub test set the worker cannot load (no copy, no network): the run's message tells the
    operator to fetch it on the workers; the core's error keeps the command line's advice."""
    import datasets

    def offline(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Couldn't reach 'uoft-cs/cifar10' on the Hub (LocalEntryNotFound)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    spec = TestSetSpec(
        id=1, name="clean", source="uoft-cs/cifar10", repo="uoft-cs/cifar10", config="plain_text",
        revision=None, split="test", subset_skip=1, subset_limit=None, num_images=10,
    )  # fmt: skip
    inputs.images_for.cache_clear()
    with pytest.raises(DataSourceError) as caught:
        inputs.images_for(spec)
    message = str(caught.value)
    assert message.startswith("test set 'clean': could not reach the Hugging Face Hub")
    assert "run `certbench datasets fetch cifar10` on every worker machine" in message
    assert "CERTBENCH_DATASETS_DIR" in message and "`folder`" in message
    assert "pass a local folder" not in message
    core = caught.value.__cause__
    assert isinstance(core, DataUnavailableError) and "pass a local folder instead" in str(core)


def test_certify_uses_the_configured_device(settings):
    assert device.resolve_device(settings.worker_device) == torch.device("cpu")


def test_stale_partial_files_of_a_killed_attempt_are_removed(tmp_path):
    target = tmp_path / "shard-00001.parquet"
    old = tmp_path / ".shard-00001.parquet.abc.tmp"
    fresh = tmp_path / ".shard-00001.parquet.def.tmp"
    other = tmp_path / ".shard-00002.parquet.ghi.tmp"
    for path in (old, fresh, other):
        path.write_bytes(b"partial")
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    os.utime(other, (hour_ago, hour_ago))
    assert remove_stale_partials(target, older_than=600) == [old]
    assert not old.exists() and fresh.exists() and other.exists()


def test_admin_rerun_resumes_from_recorded_shards(settings, session, benchmark, worker, tmp_path):
    sid = _submit(session, settings, tmp_path)
    worker.run_all()
    shard_file = storage.resolve(
        settings.artifacts_dir, storage.shard_records_relpath(sid, TEST_SETS[1], 1)
    )
    written = shard_file.stat().st_mtime_ns
    assert pipeline.reset_for_rerun(session, sid, fresh=False, settings=settings)
    assert session.scalar(select(func.count()).select_from(StageResult)) == 0
    app.send_task(VALIDATE, args=[sid])
    assert worker.run_next() == "aggregate enqueued"  # validated again, nothing left to certify
    worker.run_all()
    submission = _submission(session, sid)
    assert submission.state == S.FINISHED and submission.attempt == 1
    assert shard_file.stat().st_mtime_ns == written
    assert _shard_rows(session, sid) == 4
    assert session.scalar(select(func.count()).select_from(StageResult)) == 2
