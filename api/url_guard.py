"""Refuse control characters in request paths and query strings (422), before any route runs.

A NUL byte (``%00``) in a path or query parameter reaches SQL as a string PostgreSQL cannot store
or compare (``/api/v1/leaderboards/x?search=a%00b`` was a 500, anonymous callers included), and
no legitimate name, search or token contains a control character. Checking the decoded URL once
here covers every route, present and future, REST and web alike.
"""

from __future__ import annotations

import json
import unicodedata
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send


class ControlCharacterGuard:
    """Pure ASGI middleware: 422 ``invalid_request`` naming the parameter and the character."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            problem = find_control_character(scope)
            if problem is not None:
                await _refuse(send, *problem)
                return
        await self.app(scope, receive, send)


def find_control_character(scope: Scope) -> tuple[str, str] | None:
    """(field, message) for the first control character in the path or a query parameter."""
    where = _first_control(scope.get("path", ""))
    if where is not None:
        return "path", f"the path contains a control character ({where}); remove it"
    query = scope.get("query_string", b"").decode("latin-1")
    for name, value in parse_qsl(query, keep_blank_values=True, encoding="utf-8"):
        for part, text in (("name", name), ("value", value)):
            where = _first_control(text)
            if where is not None:
                shown = name if part == "value" else name.encode("unicode_escape").decode()
                return (
                    f"query.{shown}",
                    f"query parameter {shown!r} contains a control character in its {part} "
                    f"({where}); remove it",
                )
    return None


def _first_control(text: str) -> str | None:
    for position, char in enumerate(text):
        if unicodedata.category(char) == "Cc":
            return f"U+{ord(char):04X} at position {position}"
    return None


async def _refuse(send: Send, field: str, message: str) -> None:
    body = json.dumps(
        {
            "code": "invalid_request",
            "message": message,
            "details": [{"field": field, "message": message}],
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 422,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
