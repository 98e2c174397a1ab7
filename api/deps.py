"""Request dependencies as named ``Annotated`` aliases; permission checks build on each other.

Handlers never open sessions: ``SessionDep`` gives one per request and closes it. ``OptionalUser``
(anonymous reads of public data) → ``CurrentUser`` (401 without a valid token) → ``AdminUser``
(403 unless the role is admin).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BeforeValidator, Field
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.queue import JobQueue
from models.core.errors import AuthenticationError, PermissionDeniedError
from models.core.settings import Settings
from models.db.accounts import authenticate
from models.db.engine import get_sessionmaker
from models.db.entities import Role, User

OPTIONAL_SCHEME = "OptionalHTTPBearer"
TOKEN_HELP = "API token: `Authorization: Bearer cb_...`"
#: Two readers of the same header, so the OpenAPI document can tell endpoints that require a
#: token from those where it is optional (``api.openapi`` turns the second into ``[{}, token]``).
_bearer = HTTPBearer(auto_error=False, scheme_name="HTTPBearer", description=TOKEN_HELP)
_optional_bearer = HTTPBearer(
    auto_error=False, scheme_name=OPTIONAL_SCHEME, description=f"{TOKEN_HELP} (optional)"
)


# The dependencies that do no I/O are coroutines: FastAPI runs a plain function in its thread
# pool, a hop that cost more than a leaderboard page's own work (issue 27 §1).
async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


def get_session(settings: SettingsDep) -> Iterator[Session]:
    session = get_sessionmaker(settings)()
    try:
        yield session
    finally:
        session.close()


SessionDep = Annotated[Session, Depends(get_session)]


async def get_queue(request: Request) -> JobQueue:
    return request.app.state.queue


QueueDep = Annotated[JobQueue, Depends(get_queue)]


async def get_optional_user(
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_optional_bearer)],
) -> User | None:
    """The token's user, or None without a token. A token that is sent must be valid (401
    otherwise): a revoked token is never silently read as anonymous. Anonymous reads (most of
    them) cost no thread hop; a token is checked in the thread pool (a database read)."""
    if credentials is None:
        return None
    return await run_in_threadpool(authenticate, session, credentials.credentials)


OptionalUser = Annotated[User | None, Depends(get_optional_user)]


def get_current_user(
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> User:
    if credentials is None:
        raise AuthenticationError(
            "this endpoint needs an API token: send `Authorization: Bearer <token>`"
        )
    return authenticate(session, credentials.credentials)


CurrentUser = Annotated[User, Depends(get_current_user)]


def get_admin_user(user: CurrentUser) -> User:
    if user.role != Role.ADMIN:
        raise PermissionDeniedError(
            f"user {user.name!r} is not an admin; this endpoint is admin-only"
        )
    return user


AdminUser = Annotated[User, Depends(get_admin_user)]


#: Row ids: bounded to the 32-bit integer range both databases store (``Integer`` primary keys),
#: so an absurd id is a 422, never a database overflow (500).
MAX_ID = 2**31 - 1


def parse_id(value: object, *, name: str = "id") -> int:
    """The one reader of row ids (paths, query lists, form values): ASCII digits only, within
    1..MAX_ID. Python's ``int`` and pydantic's lax mode also take ``²``-like digits of other
    scripts, signs, spaces, ``_`` and ``5.0``, which either crash later or alias another id.
    Raises ValueError naming the value and the rule (a 422 wherever it is used)."""
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not (isinstance(text, str) and text.isascii() and text.isdigit()):
        raise ValueError(
            f"{name}: {str(value)[:40]!r} is not an id; ids are ASCII digits from 1 to {MAX_ID}"
        )
    number = int(text)
    if not 1 <= number <= MAX_ID:
        raise ValueError(f"{name}: {text[:40]} is out of range; ids run from 1 to {MAX_ID}")
    return number


def _checked_id(value: object) -> int:
    return parse_id(value)


#: A row id in a path or query (``/submissions/{submission_id}``, ``?id=3``): ``parse_id``.
#: (The bounds come first so that the OpenAPI schema states them as minimum/maximum.)
RowId = Annotated[int, Path(ge=1, le=MAX_ID), BeforeValidator(_checked_id)]
QueryId = Annotated[int, Field(ge=1, le=MAX_ID), BeforeValidator(_checked_id)]
