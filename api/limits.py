"""Refuse oversized request bodies before they are parsed or spooled to disk.

A declared ``Content-Length`` above the limit is answered 413 at once; a chunked body is counted
as it streams and cut off at the limit. Limits are per path (the submission upload gets the
weights cap) with a small default for every other route.
"""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` mid-stream; an HTTPException so FastAPI's body parsing lets it
    through to the JSON error handler as a 413 instead of a generic parse error."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            status_code=413,
            detail=f"request body is larger than the limit of {limit} bytes for this route",
        )


class BodySizeLimit:
    """Pure ASGI middleware (no buffering of the body)."""

    def __init__(self, app: ASGIApp, *, limits: dict[str, int], default_limit: int) -> None:
        self.app = app
        self.limits = limits
        self.default_limit = default_limit

    def _limit_for(self, path: str) -> int:
        return self.limits.get(path.rstrip("/"), self.default_limit)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        limit = self._limit_for(scope["path"])
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _reject(send, limit)
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, counting_receive, send)


async def _reject(send: Send, limit: int) -> None:
    body = json.dumps(
        {
            "code": "too_large",
            "message": f"request body is larger than the limit of {limit} bytes for this route",
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
