"""Stored weights are shared by content and reference-counted across artifacts (issue 19 §1);
partial files of killed writers are swept (§7); dedup holds for re-runs too (§3)."""

from __future__ import annotations

import os
import time

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from models.core.errors import ConflictError
from models.core.settings import Settings
from models.db.entities import Artifact, WeightsFile
from models.db.states import Reason, SubmissionState
from models.stages.work import get_work_item
from models.submissions import lifecycle as pipeline
from models.submissions import storage
from models.submissions.artifacts import INCOMING_DIR, remove_stale_partials
from models.submissions.intake import create_submission
from models.submissions.queries import rerun
from tests.support.service_factories import load_tiny, make_user, upload

S = SubmissionState


def _weights_file(settings: Settings, sha256: str):
    return storage.resolve(settings.artifacts_dir, storage.weights_relpath(sha256))


def test_rejecting_one_artifact_keeps_the_file_another_uses(session: Session, settings: Settings):
    benchmark = load_tiny(session)
    alice, _ = make_user(session, "alice")
    bob, _ = make_user(session, "bob")
    first = create_submission(
        session, user=alice, benchmark=benchmark, upload=upload(), settings=settings
    )
    # Same bytes, another manifest (another architecture claim): another artifact, one file.
    other = upload(name="resnet56-claim")
    second = create_submission(
        session, user=bob, benchmark=benchmark, upload=other, settings=settings
    )
    assert first.artifact_id != second.artifact_id
    path = _weights_file(settings, other.weights_sha256)
    assert path.is_file()

    assert pipeline.reject(
        session, second.id, reason=Reason.STATE_DICT_MISMATCH.value, message="no", settings=settings
    )
    assert path.read_bytes() == upload().weights
    item = get_work_item(session, first.id, settings=settings)
    assert item.weights_path == path

    # The last user gone, the file goes, for every artifact that shared it.
    assert pipeline.reject(
        session, first.id, reason=Reason.BAD_OUTPUT.value, message="no", settings=settings
    )
    assert not path.exists()
    session.expire_all()
    assert {a.weights_path for a in session.scalars(select(Artifact))} == {None}
    assert session.get(WeightsFile, other.weights_sha256).stored is False

    # Uploading the bytes again stores them again.
    again = create_submission(
        session, user=alice, benchmark=benchmark, upload=upload(name="third"), settings=settings
    )
    assert path.read_bytes() == upload().weights
    assert get_work_item(session, again.id, settings=settings).weights_path == path


def test_finished_and_failed_runs_keep_their_weights(session: Session, settings: Settings):
    benchmark = load_tiny(session)
    alice, _ = make_user(session, "alice")
    kept = create_submission(
        session, user=alice, benchmark=benchmark, upload=upload(), settings=settings
    )
    pipeline.fail(session, kept.id, reason=Reason.WORKER_ERROR.value, message="boom")
    doomed = create_submission(
        session, user=alice, benchmark=benchmark, upload=upload(name="b"), settings=settings
    )
    assert pipeline.reject(
        session, doomed.id, reason=Reason.BAD_OUTPUT.value, message="no", settings=settings
    )
    assert _weights_file(settings, upload().weights_sha256).is_file()  # a re-run may need them


def test_rerun_refuses_to_make_a_second_live_original(session: Session, settings: Settings):
    benchmark = load_tiny(session)
    alice, _ = make_user(session, "alice")
    first = create_submission(
        session, user=alice, benchmark=benchmark, upload=upload(), settings=settings
    )
    pipeline.fail(session, first.id, reason=Reason.WORKER_ERROR.value, message="boom")
    second = create_submission(
        session, user=alice, benchmark=benchmark, upload=upload(), settings=settings
    )
    assert second.state == S.SUBMITTED  # a dead original is no dedup target
    with pytest.raises(ConflictError, match=f"identical submission \\({second.id}\\)") as info:
        rerun(session, first.id, fresh=False, settings=settings)
    assert info.value.code == "duplicate"
    assert pipeline.get_state(session, first.id) == S.FAILED


def test_stale_partial_files_are_removed(settings: Settings):
    root = settings.artifacts_dir
    weights = root / "weights" / "ab"
    incoming = root / INCOMING_DIR
    for folder in (weights, incoming):
        folder.mkdir(parents=True)
    old_partial = weights / ".abc.safetensors.x1y2.tmp"
    old_upload = incoming / ".upload-1234.tmp"
    fresh_upload = incoming / ".upload-5678.tmp"
    complete = weights / f"{'ab' * 32}.safetensors"
    records = root / "records" / "1" / ".shard.parquet.tmp"
    records.parent.mkdir(parents=True)
    for path in (old_partial, old_upload, fresh_upload, complete, records):
        path.write_bytes(b"partial")
    an_hour_ago = time.time() - 3600
    for path in (old_partial, old_upload, complete, records):
        os.utime(path, (an_hour_ago, an_hour_ago))

    removed = remove_stale_partials(settings, older_than=600)
    assert sorted(removed) == sorted([old_partial, old_upload])
    assert not old_partial.exists() and not old_upload.exists()
    assert fresh_upload.exists() and complete.exists() and records.exists()
    assert remove_stale_partials(settings, older_than=600) == []
