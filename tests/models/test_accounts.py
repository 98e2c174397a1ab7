"""Users and hashed API tokens."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from models.core.errors import AuthenticationError, ConflictError
from models.db.accounts import authenticate, create_token, create_user, hash_token, revoke_token
from models.db.base import utcnow
from models.db.entities import ApiToken, Role


def test_only_the_hash_is_stored(session: Session):
    user = create_user(session, name="alice")
    issued = create_token(session, user=user, label="laptop")
    stored = session.scalars(select(ApiToken)).one()
    assert issued.secret.startswith("cb_") and len(issued.secret) > 40
    assert stored.token_hash == hash_token(issued.secret) != issued.secret
    assert issued.secret not in (stored.prefix, stored.label, stored.token_hash)
    assert issued.secret.startswith(stored.prefix)
    assert authenticate(session, issued.secret).id == user.id
    assert stored.last_used_at is not None


def test_bad_revoked_and_expired_tokens(session: Session):
    user = create_user(session, name="bob", role=Role.ADMIN)
    with pytest.raises(AuthenticationError, match="invalid API token"):
        authenticate(session, "cb_nope")
    issued = create_token(session, user=user)
    revoke_token(session, token_id=issued.token.id)
    with pytest.raises(AuthenticationError, match="revoked"):
        authenticate(session, issued.secret)
    old = create_token(session, user=user, expires_at=utcnow() - timedelta(seconds=1))
    with pytest.raises(AuthenticationError, match="expired"):
        authenticate(session, old.secret)
    user.is_active = False
    session.commit()
    fresh = create_token(session, user=user)
    with pytest.raises(AuthenticationError, match="deactivated"):
        authenticate(session, fresh.secret)


def test_user_names(session: Session):
    create_user(session, name="carol")
    with pytest.raises(ConflictError, match="already taken"):
        create_user(session, name="carol")
    with pytest.raises(ConflictError, match="invalid"):
        create_user(session, name="no spaces allowed")
