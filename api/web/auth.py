"""Browser sign-in for the web pages: the user pastes an API token once, we keep it in a cookie.

Why a cookie holding the token (and no server-side session table): the service already stores only
token hashes and checks tokens with ``models.db.accounts.authenticate``; a browser session is then
exactly a bearer token the browser sends for us. The cookie is ``HttpOnly`` (scripts cannot read
it), ``SameSite=Strict`` (other sites cannot make the browser send it, which also guards the
state-changing forms against CSRF; they additionally check ``Origin``), ``Secure`` when the request
came over HTTPS, and lives no longer than ``COOKIE_MAX_AGE``. Signing out deletes it; revoking the
token on the server ends every browser session that used it.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Request
from fastapi.responses import Response

from api.deps import SessionDep
from models.core.errors import AuthenticationError, PermissionDeniedError
from models.db.accounts import authenticate
from models.db.entities import User

COOKIE_NAME = "certbench_token"
COOKIE_MAX_AGE = 12 * 3600


def web_viewer(request: Request, session: SessionDep) -> User | None:
    """The signed-in user, or None (no cookie, or a token that is no longer valid).

    An invalid cookie is an expected case (token revoked or expired since sign-in): the visitor
    is treated as anonymous and ``request.state.stale_cookie`` tells the page to clear it.
    """
    token = request.cookies.get(COOKIE_NAME)
    if not token:
        return None
    try:
        return authenticate(session, token)
    except AuthenticationError:
        request.state.stale_cookie = True
        return None


WebViewer = Annotated[User | None, Depends(web_viewer)]


def set_token_cookie(request: Request, response: Response, token: str) -> None:
    response.set_cookie(
        COOKIE_NAME,
        token,
        max_age=COOKIE_MAX_AGE,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )


def clear_token_cookie(response: Response) -> None:
    response.delete_cookie(COOKIE_NAME, path="/", httponly=True, samesite="strict")


def check_same_origin(request: Request) -> None:
    """Refuse a form POST sent from another origin (defence in depth next to SameSite)."""
    origin = request.headers.get("origin") or request.headers.get("referer")
    if origin is None:
        return  # non-browser clients and privacy-stripped requests; SameSite still applies
    parts = urlsplit(origin)
    if (parts.scheme, parts.netloc) != (request.url.scheme, request.url.netloc):
        raise PermissionDeniedError(
            f"form posted from {parts.scheme}://{parts.netloc}, not from this site; "
            "submit the form from the certbench page itself"
        )
