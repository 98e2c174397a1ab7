"""Which Redis database each end-to-end stack owns, recorded where no test flushes it.

Every stack (the session's shared one per pytest-xdist process, and the demo and broker-loss
tests' own) needs a Redis database nobody else reads: a worker on a shared database takes the
other stack's tasks ("submission 3 does not exist") and the other stack's runs never finish.

The claims are keys in a registry database (``REGISTRY_DB``), not a marker inside the claimed
database: the broker-loss test FLUSHDBs its broker on purpose, and a marker inside it would vanish
with it, leaving a database in use that looks free. (CI refused a stop for exactly that: the
demo test claimed the broker-loss stack's wiped database, and both stacks' workers ate each
other's tasks.) A claim names its host and process; a claim whose process is gone (a killed run)
is taken over, and every claim expires after ``CLAIM_SECONDS`` in any case.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import redis

#: The registry of claims: a database neither the API tests (10..13) nor the e2e stacks use.
REGISTRY_DB = 0
CLAIM_KEY = "certbench-e2e-claim:{index}"
#: Longer than any test session, serial runs included; a dead owner's claim is taken over sooner.
CLAIM_SECONDS = 6 * 3600


@dataclass(frozen=True)
class Claim:
    """A database index held by this process until ``release``."""

    index: int
    owner: str


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"


def _owner_is_gone(owner: str) -> bool:
    """True when ``owner`` was a process on this host that no longer runs."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def claim(host: str, port: int, indices: Iterable[int]) -> Claim | None:
    """Claim the first free database of ``indices`` and empty it (a killed run may have left
    keys behind); None when every one is held by a live owner."""
    registry = redis.Redis(host, port, db=REGISTRY_DB, socket_connect_timeout=5)
    owner = _owner()
    for index in indices:
        key = CLAIM_KEY.format(index=index)
        if not registry.set(key, owner, nx=True, ex=CLAIM_SECONDS):
            held = registry.get(key)
            if held is None or not _owner_is_gone(held.decode()):
                continue
            # the previous owner was killed: take over only if nobody else did meanwhile
            with registry.pipeline() as pipe:
                try:
                    pipe.watch(key)
                    if pipe.get(key) != held:
                        continue
                    pipe.multi()
                    pipe.set(key, owner, ex=CLAIM_SECONDS)
                    pipe.execute()
                except redis.WatchError:
                    continue
        redis.Redis(host, port, db=index).flushdb()
        return Claim(index=index, owner=owner)
    return None


def release(host: str, port: int, held: Claim) -> None:
    """Empty the claimed database and give it back (only if the claim is still this one's)."""
    key = CLAIM_KEY.format(index=held.index)
    registry = redis.Redis(host, port, db=REGISTRY_DB)
    if registry.get(key) != held.owner.encode():
        return
    redis.Redis(host, port, db=held.index).flushdb()
    with registry.pipeline() as pipe:
        try:
            pipe.watch(key)
            if pipe.get(key) == held.owner.encode():
                pipe.multi()
                pipe.delete(key)
                pipe.execute()
        except redis.WatchError:
            pass  # taken over meanwhile: not ours to delete
