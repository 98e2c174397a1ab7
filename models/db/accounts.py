"""Users and API tokens.

Tokens are 32 random bytes (``cb_`` + URL-safe base64) shown once at creation; only their SHA-256
is stored. A fast hash is enough here (unlike passwords): a 256-bit random secret cannot be
guessed, and a constant-cost lookup keeps authentication off the request latency budget.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from models.core.errors import AuthenticationError, ConflictError, NotFoundError
from models.db.base import utcnow
from models.db.entities import ApiToken, Role, User

TOKEN_PREFIX = "cb_"
_USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: last_used_at is refreshed at most this often, so reads do not turn into writes.
LAST_USED_RESOLUTION = timedelta(minutes=5)


@dataclass(frozen=True)
class IssuedToken:
    """A freshly created token: ``secret`` is shown to the user once and never stored."""

    token: ApiToken
    secret: str


def hash_token(secret: str) -> str:
    """SHA-256 hex digest of a token secret (what the database stores)."""
    return hashlib.sha256(secret.encode()).hexdigest()


def create_user(
    session: Session, *, name: str, role: Role = Role.SUBMITTER, email: str | None = None
) -> User:
    """A new active user. Raises ConflictError if the name is taken."""
    if not _USER_NAME.match(name):
        raise ConflictError(
            f"user name {name!r} is invalid: use 1-64 letters, digits, '_', '.' or '-'",
            code="invalid_name",
        )
    user = User(name=name, role=role, email=email)
    session.add(user)
    try:
        session.commit()
    except IntegrityError as err:
        session.rollback()
        raise ConflictError(f"user name {name!r} is already taken; choose another") from err
    return user


def get_user(session: Session, *, user_id: int | None = None, name: str | None = None) -> User:
    """A user by id or name. Raises NotFoundError."""
    if user_id is not None:
        user = session.get(User, user_id)
    else:
        user = session.scalar(select(User).where(User.name == name))
    if user is None:
        raise NotFoundError(f"user {user_id if user_id is not None else name!r} does not exist")
    return user


def list_users(session: Session) -> list[User]:
    """Every user, oldest first."""
    return list(session.scalars(select(User).order_by(User.id)))


def create_token(
    session: Session, *, user: User, label: str = "", expires_at: datetime | None = None
) -> IssuedToken:
    """Issue a new token for ``user``; the returned secret is the only copy."""
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(
        user_id=user.id,
        token_hash=hash_token(secret),
        prefix=secret[: len(TOKEN_PREFIX) + 6],
        label=label,
        expires_at=expires_at,
    )
    session.add(token)
    session.commit()
    return IssuedToken(token=token, secret=secret)


def revoke_token(session: Session, *, token_id: int) -> ApiToken:
    """Revoke a token (it stops working at once). Raises NotFoundError."""
    token = session.get(ApiToken, token_id)
    if token is None:
        raise NotFoundError(f"token {token_id} does not exist")
    if token.revoked_at is None:
        token.revoked_at = utcnow()
        session.commit()
    return token


def authenticate(session: Session, secret: str) -> User:
    """The active user owning this token secret. Raises AuthenticationError (never says which
    check failed beyond what helps the owner: expired and revoked are named)."""
    token = session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(secret)))
    if token is None:
        raise AuthenticationError(
            "invalid API token; an admin can create one with `certbench admin create-token`"
        )
    now = utcnow()
    if token.revoked_at is not None:
        raise AuthenticationError(f"API token {token.prefix}… was revoked; create a new one")
    if token.expires_at is not None and token.expires_at <= now:
        raise AuthenticationError(f"API token {token.prefix}… expired; create a new one")
    user = token.user
    if not user.is_active:
        raise AuthenticationError(f"user {user.name!r} is deactivated")
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        token.last_used_at = now
        session.commit()
    return user
