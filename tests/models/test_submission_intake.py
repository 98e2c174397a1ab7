"""Submission intake: storage, dedup, quotas, visibility, queue position, cancel, moderation."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models.core.errors import InvalidTransitionError, NotFoundError, QuotaExceededError
from models.core.settings import Settings
from models.db.entities import Artifact, Role, Submission
from models.db.states import Reason, SubmissionState
from models.stages.work import get_work_item
from models.submissions import lifecycle as pipeline
from models.submissions.intake import create_submission
from models.submissions.queries import cancel, get_visible, queue_position, rerun, set_moderation
from models.submissions.quotas import quota_usage
from tests.support.service_factories import load_tiny, make_user, run_pipeline, upload

S = SubmissionState


def test_create_stores_weights_once(session: Session, settings: Settings):
    benchmark = load_tiny(session)
    user, _ = make_user(session, "alice")
    first = create_submission(
        session, user=user, benchmark=benchmark, upload=upload(), settings=settings
    )
    assert first.state == S.SUBMITTED and first.protocol_version == "test-v1"
    path = get_work_item(session, first.id, settings=settings).weights_path
    assert path is not None and path.read_bytes() == upload().weights
    assert path.name == f"{upload().weights_sha256}.safetensors"


def test_identical_upload_is_a_duplicate(session: Session, settings: Settings):
    benchmark = load_tiny(session)
    alice, _ = make_user(session, "alice")
    bob, _ = make_user(session, "bob")
    original = create_submission(
        session, user=alice, benchmark=benchmark, upload=upload(), settings=settings
    )
    again = create_submission(
        session, user=alice, benchmark=benchmark, upload=upload(), settings=settings
    )
    assert again.state == S.DUPLICATE and again.duplicate_of_id == original.id
    assert again.reason == Reason.DUPLICATE and f"submission {original.id}" in again.message
    assert session.scalar(select(func.count()).select_from(Artifact)) == 1
    # Another manifest (other sigma) is a different job.
    other = create_submission(
        session, user=alice, benchmark=benchmark, upload=upload(sigma=0.5), settings=settings
    )
    assert other.state == S.SUBMITTED
    # A private original is not revealed to someone else.
    secret = create_submission(
        session, user=bob, benchmark=benchmark, upload=upload(seed=9, private=True),
        settings=settings,
    )  # fmt: skip
    copy = create_submission(
        session, user=alice, benchmark=benchmark, upload=upload(seed=9), settings=settings
    )
    assert copy.state == S.DUPLICATE and copy.duplicate_of_id == secret.id
    assert str(secret.id) not in copy.message and "private" in copy.message


def test_dead_original_is_not_a_dedup_target(session: Session, settings: Settings):
    benchmark = load_tiny(session)
    alice, _ = make_user(session, "alice")
    first = create_submission(
        session, user=alice, benchmark=benchmark, upload=upload(), settings=settings
    )
    pipeline.fail(session, first.id, reason=Reason.WORKER_ERROR.value, message="boom")
    second = create_submission(
        session, user=alice, benchmark=benchmark, upload=upload(), settings=settings
    )
    assert second.state == S.SUBMITTED


def test_concurrency_and_daily_quotas(session: Session, settings: Settings):
    settings = settings.model_copy(
        update={"quota_concurrent": 2, "quota_submissions_per_day": 3, "quota_failed_per_day": 1}
    )
    benchmark = load_tiny(session)
    alice, _ = make_user(session, "alice")
    admin, _ = make_user(session, "root", Role.ADMIN)
    ids = [
        create_submission(
            session, user=alice, benchmark=benchmark, upload=upload(seed=i), settings=settings
        ).id
        for i in range(2)
    ]
    with pytest.raises(QuotaExceededError, match="limit is 2 at a time") as info:
        create_submission(
            session, user=alice, benchmark=benchmark, upload=upload(seed=5), settings=settings
        )
    assert info.value.code == "quota_concurrent"
    # Duplicates are free.
    dup = create_submission(
        session, user=alice, benchmark=benchmark, upload=upload(seed=0), settings=settings
    )
    assert dup.state == S.DUPLICATE
    run_pipeline(session, ids[0], settings=settings)
    create_submission(
        session, user=alice, benchmark=benchmark, upload=upload(seed=6), settings=settings
    )
    usage = quota_usage(session, alice)
    assert (usage.submissions_today, usage.active, usage.unsuccessful_today) == (3, 2, 0)
    cancel(session, ids[1], by=alice)
    with pytest.raises(QuotaExceededError, match="last 24 hours") as info:
        create_submission(
            session, user=alice, benchmark=benchmark, upload=upload(seed=7), settings=settings
        )
    assert info.value.code == "quota_daily"
    # Admins are exempt.
    for seed in range(10, 14):
        create_submission(
            session, user=admin, benchmark=benchmark, upload=upload(seed=seed), settings=settings
        )


def test_unsuccessful_quota_is_separate(session: Session, settings: Settings):
    settings = settings.model_copy(
        update={"quota_concurrent": 5, "quota_submissions_per_day": 1, "quota_failed_per_day": 2}
    )
    benchmark = load_tiny(session)
    alice, _ = make_user(session, "alice")
    first = create_submission(
        session, user=alice, benchmark=benchmark, upload=upload(seed=1), settings=settings
    )
    pipeline.reject(session, first.id, reason="bad_output", message="NaN", settings=settings)
    # The rejected one does not use the main budget ...
    second = create_submission(
        session, user=alice, benchmark=benchmark, upload=upload(seed=2), settings=settings
    )
    pipeline.fail(session, second.id, reason="worker_error", message="x")
    # ... but now 2 unsuccessful ≥ 2 allowed.
    with pytest.raises(QuotaExceededError) as info:
        create_submission(
            session, user=alice, benchmark=benchmark, upload=upload(seed=3), settings=settings
        )
    assert info.value.code == "quota_unsuccessful"


def test_visibility_and_queue_position(session: Session, settings: Settings):
    benchmark = load_tiny(session)
    alice, _ = make_user(session, "alice")
    bob, _ = make_user(session, "bob")
    admin, _ = make_user(session, "root", Role.ADMIN)
    public = create_submission(
        session, user=alice, benchmark=benchmark, upload=upload(seed=1), settings=settings
    )
    private = create_submission(
        session, user=alice, benchmark=benchmark, upload=upload(seed=2, private=True),
        settings=settings,
    )  # fmt: skip
    assert queue_position(session, public) == 1 and queue_position(session, private) == 2
    assert get_visible(session, private.id, viewer=alice).id == private.id
    assert get_visible(session, private.id, viewer=admin).id == private.id
    assert get_visible(session, public.id, viewer=None).id == public.id
    for viewer in (bob, None):
        with pytest.raises(NotFoundError, match="not yours"):
            get_visible(session, private.id, viewer=viewer)
    with pytest.raises(NotFoundError):
        get_visible(session, public.id, viewer=bob, owner_only=True)
    run_pipeline(session, public.id, settings=settings)
    session.refresh(private)
    assert queue_position(session, public) is None and queue_position(session, private) == 1


def test_cancel_rules(session: Session, settings: Settings):
    benchmark = load_tiny(session)
    alice, _ = make_user(session, "alice")
    bob, _ = make_user(session, "bob")
    admin, _ = make_user(session, "root", Role.ADMIN)
    mine = create_submission(
        session, user=alice, benchmark=benchmark, upload=upload(seed=1), settings=settings
    )
    with pytest.raises(NotFoundError):
        cancel(session, mine.id, by=bob)
    cancelled = cancel(session, mine.id, by=admin)
    assert cancelled.state == S.CANCELLED and cancelled.reason == Reason.CANCELLED_BY_ADMIN
    with pytest.raises(InvalidTransitionError, match="is cancelled"):
        cancel(session, mine.id, by=alice)
    again = rerun(session, mine.id, fresh=False, settings=settings)
    assert again.state == S.SUBMITTED and again.attempt == 1
    with pytest.raises(InvalidTransitionError, match="only finished"):
        rerun(session, mine.id, fresh=False, settings=settings)


def test_moderation(session: Session, settings: Settings):
    benchmark = load_tiny(session)
    alice, _ = make_user(session, "alice")
    sub = create_submission(
        session, user=alice, benchmark=benchmark, upload=upload(), settings=settings
    )
    set_moderation(session, sub.id, flagged=True, flag_reason="trained on test data")
    set_moderation(session, sub.id, hidden=True, is_baseline=True)
    row = session.get(Submission, sub.id)
    assert (row.flagged, row.flag_reason, row.hidden, row.is_baseline) == (
        True,
        "trained on test data",
        True,
        True,
    )
    set_moderation(session, sub.id, flagged=False)
    assert session.get(Submission, sub.id).flag_reason is None
