"""Record (and refuse) every attempt of this process to reach beyond the loopback interface.

``network_attempts`` patches ``socket.socket.connect`` / ``connect_ex`` and ``socket.getaddrinfo``
for the duration of a ``with`` block: a connection or name lookup for a host other than
127.0.0.1, ::1 or localhost (or a Unix socket) is recorded and fails with OSError, as on a
machine without network. The block's caller asserts the record is empty: "no network access was
attempted" is then a fact of the run, not a property of the library's defaults (timm downloads
pretrained weights from the Hugging Face Hub when asked to)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost", "testserver", ""})


def _local(host: Any) -> bool:
    return host is None or (isinstance(host, bytes | str) and str(host) in LOOPBACK)


@contextmanager
def network_attempts() -> Iterator[list[str]]:
    """The hosts this process tried to reach inside the block (each attempt was refused)."""
    attempts: list[str] = []
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def refuse(what: str) -> OSError:
        attempts.append(what)
        return OSError(f"network access attempted in a test that forbids it: {what}")

    def connect(self: socket.socket, address: Any) -> None:
        if isinstance(address, tuple) and not _local(address[0]):
            raise refuse(f"connect {address!r}")
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if isinstance(address, tuple) and not _local(address[0]):
            raise refuse(f"connect_ex {address!r}")
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not _local(host):
            raise refuse(f"getaddrinfo {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", connect)
        patch.setattr(socket.socket, "connect_ex", connect_ex)
        patch.setattr(socket, "getaddrinfo", getaddrinfo)
        yield attempts
