"""The daily compute quota: what each submission is charged (its forward passes × its network's
FLOPs per sample), the 422/429 refusals and when a refused submission fits (Retry-After), on
SQLite and PostgreSQL."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from models.core.errors import IntakeError, QuotaExceededError
from models.core.settings import Settings
from models.db.base import utcnow
from models.db.entities import Role, Submission, User
from models.db.states import Reason, SubmissionState
from models.submissions import compute_quota
from models.submissions.intake import create_submission
from tests.support.service_factories import load_tiny, make_user, manifest, upload

S = SubmissionState
#: FLOPs per sample of the factories' network (a CIFAR ResNet-20 on 3×32×32), counted on meta.
F = compute_quota.network_flops(manifest())


def _made(session: Session, settings: Settings, user: User, seed: int, passes: int, *,
          hours_ago: float, **values: object) -> int:  # fmt: skip
    """A submission estimated at ``passes`` made ``hours_ago``, then set to ``values``."""
    sid = create_submission(
        session, user=user, benchmark=load_tiny(session), upload=upload(seed=seed),
        settings=settings, forward_passes=passes,
    ).id  # fmt: skip
    session.execute(
        update(Submission)
        .where(Submission.id == sid)
        .values(created_at=utcnow() - timedelta(hours=hours_ago), **values)
    )
    session.commit()
    return sid


@pytest.fixture
def roomy(settings: Settings) -> Settings:
    """Room for the setup's submissions; the concurrency and count quotas out of the way."""
    return settings.model_copy(update={"quota_flops_per_day": 10_000 * F, "quota_concurrent": 50})


def test_charges_count_estimated_work_and_only_what_cancelled_runs_computed(session, roomy):
    alice, _ = make_user(session, "alice")
    _made(session, roomy, alice, 1, 100, hours_ago=20, state=S.FINISHED)
    _made(session, roomy, alice, 2, 80, hours_ago=2, state=S.CANCELLED, progress=0.25)
    _made(session, roomy, alice, 3, 60, hours_ago=1, state=S.FAILED, progress=0.5,
          reason=Reason.WORKER_ERROR.value)  # fmt: skip
    _made(session, roomy, alice, 4, 500, hours_ago=1, state=S.REJECTED)  # refused at validation
    _made(session, roomy, alice, 5, 500, hours_ago=1, state=S.FAILED,
          reason=Reason.QUEUE_UNAVAILABLE.value)  # the service's failure, not theirs  # fmt: skip
    _made(session, roomy, alice, 6, 900, hours_ago=30, state=S.FINISHED)  # left the window
    _made(session, roomy, alice, 7, 40, hours_ago=0.5)  # waiting: charged in full
    usage = compute_quota.usage(session, alice, settings=roomy)
    assert usage.used == (100 + 20 + 30 + 40) * F
    assert usage.forward_passes == 100 + 20 + 30 + 40
    assert [cost for _, cost in usage.charges] == [100 * F, 20 * F, 30 * F, 40 * F]  # oldest first


def test_429_says_when_enough_older_work_leaves_the_window(session, roomy):
    tight = roomy.model_copy(update={"quota_flops_per_day": 200 * F})
    alice, _ = make_user(session, "alice")
    _made(session, roomy, alice, 1, 100, hours_ago=20, state=S.FINISHED)
    _made(session, roomy, alice, 2, 50, hours_ago=10, state=S.RUNNING)
    compute_quota.check(session, alice, 50 * F, settings=tight)  # 150 + 50 fits exactly
    with pytest.raises(QuotaExceededError) as refused:
        compute_quota.check(session, alice, 120 * F, settings=tight)
    error = refused.value
    assert error.code == "quota_compute"
    # 150 + 120 − 200 = 70 must leave the window: the 20-hour-old 100 does so in 4 hours
    assert 4 * 3600 - 60 < error.retry_after <= 4 * 3600
    assert error.details == [{"flops": 120 * F, "used": 150 * F, "limit": 200 * F, "left": 50 * F,
                              "retry_after_seconds": error.retry_after}]  # fmt: skip
    with pytest.raises(QuotaExceededError) as both:
        compute_quota.check(session, alice, 200 * F, settings=tight)  # needs both to expire
    assert 14 * 3600 - 60 < both.value.retry_after <= 14 * 3600


def test_an_estimate_beyond_the_quota_is_a_422_and_admins_are_exempt(session, roomy):
    alice, _ = make_user(session, "alice")
    root, _ = make_user(session, "root", Role.ADMIN)
    message = re.escape(f"estimated at {10_001 * F:.4g} FLOPs")
    with pytest.raises(IntakeError, match=message) as refused:
        compute_quota.check(session, alice, 10_001 * F, settings=roomy)
    assert refused.value.code == "estimate_exceeds_quota"
    assert "CERTBENCH_QUOTA_FLOPS_PER_DAY" in str(refused.value)
    compute_quota.check(session, root, 10**12 * F, settings=roomy)


def test_the_intake_transaction_refuses_what_does_not_fit_and_stores_nothing(session, roomy):
    tight = roomy.model_copy(update={"quota_flops_per_day": 200 * F})
    alice, _ = make_user(session, "alice")
    _made(session, roomy, alice, 1, 150, hours_ago=1)
    with pytest.raises(QuotaExceededError, match=re.escape(f"only {50 * F:.4g} of your daily")):
        create_submission(
            session, user=alice, benchmark=load_tiny(session), upload=upload(seed=2),
            settings=tight, forward_passes=100,
        )  # fmt: skip
    session.rollback()
    assert session.scalar(select(func.count()).select_from(Submission)) == 1
    stored = create_submission(
        session, user=alice, benchmark=load_tiny(session), upload=upload(seed=3),
        settings=tight, forward_passes=50,
    )  # fmt: skip
    assert (stored.estimated_forward_passes, stored.flops_per_sample) == (50, F)


def test_a_heavier_network_is_charged_its_flops_and_legacy_rows_their_manifests(session, roomy):
    """The same forward passes cost what the network costs: a submission intake counted at 10×
    the FLOPs per sample is charged 10×; one made before intake counted FLOPs (NULL, migration
    0015) is charged at its manifest's network counted now, not at nothing."""
    alice, _ = make_user(session, "alice")
    heavy = _made(session, roomy, alice, 1, 30, hours_ago=3)
    session.execute(update(Submission).where(Submission.id == heavy)
                    .values(flops_per_sample=10 * F))  # fmt: skip
    legacy = _made(session, roomy, alice, 2, 7, hours_ago=2)
    session.execute(update(Submission).where(Submission.id == legacy).values(flops_per_sample=None))
    session.commit()
    usage = compute_quota.usage(session, alice, settings=roomy)
    assert [cost for _, cost in usage.charges] == [30 * 10 * F, 7 * F]
    assert usage.used == 307 * F and usage.forward_passes == 37


def test_the_retired_forward_pass_variable_is_refused_by_name(monkeypatch, tmp_path):
    """An operator's old CERTBENCH_QUOTA_FORWARD_PASSES_PER_DAY would be ignored silently (unknown
    CERTBENCH_* variables are): the settings refuse it and name the replacement."""
    monkeypatch.setenv("CERTBENCH_QUOTA_FORWARD_PASSES_PER_DAY", "1000")
    with pytest.raises(ValueError, match="use CERTBENCH_QUOTA_FLOPS_PER_DAY"):
        Settings(data_dir=tmp_path)
    monkeypatch.delenv("CERTBENCH_QUOTA_FORWARD_PASSES_PER_DAY")
    monkeypatch.setenv("CERTBENCH_QUOTA_FLOPS_PER_DAY", str(3 * F))
    assert Settings(data_dir=tmp_path).quota_flops_per_day == 3 * F
