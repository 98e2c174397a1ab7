"""Network namespaces: the ``ip`` commands the fleet is built with, and entering one from Python.

Python 3.11 has no ``os.setns`` (3.12 does), so :func:`enter` calls libc's ``setns(2)`` through
ctypes. It moves the calling thread only; sockets opened afterwards live in that namespace, and
so do threads and processes it starts. ``ip netns`` keeps a namespace as a bind mount under
``/var/run/netns/<name>``.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

NETNS_DIR = Path("/var/run/netns")
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``ip ARGS`` (iproute2); raise with its message when ``check`` and it fails."""
    run = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and run.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {run.stderr.strip()}")
    return run


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns failed: {os.strerror(err)}")


def enter(name: str) -> None:
    """Move the calling thread into namespace ``name`` (for good)."""
    fd = os.open(NETNS_DIR / name, os.O_RDONLY)
    try:
        _setns(fd)
    finally:
        os.close(fd)


@contextmanager
def inside(name: str) -> Iterator[None]:
    """The calling thread in namespace ``name`` for the block, then back where it was."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        enter(name)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(home)


def existing(prefix: str) -> list[str]:
    """The namespaces whose names start with ``prefix``."""
    if not NETNS_DIR.is_dir():
        return []
    return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(prefix))


def pids(name: str) -> list[int]:
    """Processes living in namespace ``name`` (``ip netns pids``)."""
    run = ip("netns", "pids", name, check=False)
    return [int(p) for p in run.stdout.split()] if run.returncode == 0 else []
