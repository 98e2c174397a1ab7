"""Refused uploads count against a per-user rate limit (issue 27 §2): they create no submission,
so no quota saw them, and a 24-byte upload declaring a large network could be sent again and
again. Past ``refused_uploads_per_window`` refusals in the window, uploads answer 429 with
Retry-After and say why; other users and admins are not affected."""

from __future__ import annotations

import struct

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.main import create_app
from models.core.settings import Settings
from models.db.entities import UploadRefusal
from tests.support.api import Actors
from tests.support.service_factories import manifest, multipart, weights_bytes

URL = "/api/v1/submissions"
EMPTY = struct.pack("<Q", 2) + b"{}"
LIMIT = 3


def _count(session: Session) -> int:
    session.expire_all()
    return session.scalar(select(func.count()).select_from(UploadRefusal))


def test_refused_uploads_are_rate_limited_per_user(
    settings: Settings, actors: Actors, session: Session
):
    tight = settings.model_copy(
        update={"refused_uploads_per_window": LIMIT, "refused_uploads_window_seconds": 600}
    )
    with TestClient(create_app(tight), raise_server_exceptions=False) as client:
        for _ in range(LIMIT):
            refused = client.post(URL, headers=actors.alice, **multipart(EMPTY, manifest()))
            assert refused.status_code == 422, refused.text
        assert _count(session) == LIMIT
        # the next upload, even a good one, waits for the window
        limited = client.post(URL, headers=actors.alice, **multipart(weights_bytes(), manifest()))
        assert limited.status_code == 429, limited.text
        assert limited.json()["code"] == "too_many_refused_uploads"
        assert (
            f"{LIMIT} of your uploads were refused in the last 600 s" in limited.json()["message"]
        )
        assert 1 <= int(limited.headers["Retry-After"]) <= 600
        assert _count(session) == LIMIT  # a rate-limited request is not another refusal
        # other users and admins are not limited by alice's refusals
        other = client.post(URL, headers=actors.bob, **multipart(weights_bytes(), manifest()))
        assert other.status_code == 202, other.text
        for _ in range(LIMIT + 1):
            admin = client.post(URL, headers=actors.admin, **multipart(EMPTY, manifest()))
            assert admin.status_code == 422, admin.text


def test_the_limit_can_be_turned_off(settings: Settings, actors: Actors, session: Session):
    off = settings.model_copy(update={"refused_uploads_per_window": 0})
    with TestClient(create_app(off), raise_server_exceptions=False) as client:
        for _ in range(5):
            refused = client.post(URL, headers=actors.alice, **multipart(EMPTY, manifest()))
            assert refused.status_code == 422
    assert _count(session) == 0


def test_refusals_older_than_the_window_no_longer_count(
    settings: Settings, actors: Actors, session: Session
):
    from datetime import timedelta

    from models.db.base import utcnow
    from models.db.entities import User
    from models.submissions import refusals as upload_refusals

    alice = session.get(User, actors.alice_id)
    tight = settings.model_copy(
        update={"refused_uploads_per_window": 2, "refused_uploads_window_seconds": 60}
    )
    old = utcnow() - timedelta(seconds=61)
    for _ in range(2):
        upload_refusals.record(session, alice, "state_dict_mismatch", settings=tight, now=old)
    upload_refusals.check(session, alice, settings=tight)  # both left the window: no error
    upload_refusals.record(session, alice, "state_dict_mismatch", settings=tight)
    assert _count(session) == 1  # the old rows were pruned
