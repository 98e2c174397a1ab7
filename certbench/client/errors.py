"""Errors of the certbench client: what the server said (message, code, HTTP status), or why it
could not be reached (naming the URL tried).

All derive from ``certbench.errors.CertbenchError``, so the CLI prints them as one line.
"""

from __future__ import annotations

from typing import Any

from certbench.errors import CertbenchError


class ClientError(CertbenchError):
    """A request the server refused, or a response the client cannot use.

    ``status`` is the HTTP status (None when no response came back), ``code`` the server's
    machine-readable error code (``not_found``, ``quota_daily``, ``weights_not_public`` ...),
    ``message`` its explanation, ``details`` any structured details it sent.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        details: Any = None,
        url: str | None = None,
    ) -> None:
        self.message = message
        self.status = status
        self.code = code
        self.details = details
        self.url = url
        super().__init__(message)

    def __str__(self) -> str:
        label = ", ".join(
            part
            for part in (f"HTTP {self.status}" if self.status else None, self.code)
            if part is not None
        )
        return f"{self.message} ({label})" if label else self.message


class AuthenticationFailed(ClientError):
    """401: no token, or a token the server does not accept (unknown, expired, revoked)."""


class PermissionDenied(ClientError):
    """403: the token is valid but may not do this (e.g. weights that are not published)."""


class NotFound(ClientError):
    """404: no such object, or another user's private one (the server does not tell which)."""


class ServerUnreachable(ClientError):
    """No HTTP response: the server is down, the URL is wrong, or the network failed."""


class HashMismatchError(ClientError):
    """Downloaded weights whose SHA-256 differs from the one the server published: the file was
    corrupted in storage or in transit, and is refused."""


class WaitTimeout(ClientError):
    """``Client.wait`` gave up before the submission reached a terminal state."""


def for_status(status: int) -> type[ClientError]:
    """The ClientError subclass of an HTTP error status."""
    return {401: AuthenticationFailed, 403: PermissionDenied, 404: NotFound}.get(
        status, ClientError
    )
