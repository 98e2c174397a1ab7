"""The fleet's wire: a user-space Ethernet switch between the hosts' TAP devices, with partitions
and netem-style impairments.

This kernel has no ``sch_netem`` and no ``tc`` actions (``tc qdisc add ... netem`` answers
"Specified qdisc kind is unknown"; only htb, tbf and pfifo load) and no iptables, so faults cannot
be put on a veth pair. Instead each host's ``eth0`` is a TAP device whose other end is a file
descriptor of this process: every Ethernet frame a host sends arrives here, and this process
decides whether, when and how often it reaches the host it is for. The hosts' kernels run real
TCP over it, so a dropped frame is retransmitted, a delayed one stretches round trips, a
duplicate is discarded by the receiver's TCP: what ``netem`` does on a link (the same knobs:
delay with jitter, loss, duplication, reordering).

Rules (sent as JSON lines on stdin; each gets a JSON reply on stdout):

- ``{"op": "block", "id": "f1", "a": "w1", "b": null, "port": null}``: drop every frame between
  host ``a`` and host ``b`` (``null``: any host), only TCP/UDP frames with ``port`` as source or
  destination port when given (so ``"b": "db", "port": 6379`` cuts ``a`` from Redis but not from
  PostgreSQL on the same host). Frames are dropped silently: a partition, not a refusal.
- ``{"op": "impair", "id": "f3", "host": "w2", "delay_ms": 200, "jitter_ms": 50, "loss": 0.1,
  "duplicate": 0.05, "reorder": 0.25}``: every frame to or from ``host`` is lost with probability
  ``loss``, else delayed by a normal(delay, jitter) draw (at least 0) — except a ``reorder``
  fraction sent at once, overtaking the delayed ones, as netem's ``reorder`` — and sent twice
  with probability ``duplicate``.
- ``{"op": "heal", "id": "f1"}`` removes a rule; ``{"op": "stats"}`` counts frames per rule;
  ``{"op": "quit"}`` ends the switch (the TAP devices vanish with it).

Usage (as root; the namespaces exist):
``python -m scripts.fleet_check.switch NS=HOST ... --seed 1``; it prints ``{"ready": true}``
once every TAP device is open.
"""

from __future__ import annotations

import argparse
import fcntl
import heapq
import itertools
import json
import os
import random
import select
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from scripts.fleet_check import netns

TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
DEVICE = "eth0"
ETH_IPV4 = 0x0800
MAX_FRAME = 65536


def open_tap(namespace: str) -> int:
    """A non-blocking TAP device named ``eth0`` inside ``namespace``; its frames on the fd."""
    with netns.inside(namespace):
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
        request = struct.pack("16sH", DEVICE.encode(), IFF_TAP | IFF_NO_PI)
        fcntl.ioctl(fd, TUNSETIFF, request)
    return fd


def ports_of(frame: bytes) -> tuple[int, int] | None:
    """(source port, destination port) of an IPv4 TCP or UDP frame, else None."""
    if len(frame) < 34 or int.from_bytes(frame[12:14], "big") != ETH_IPV4:
        return None
    header = (frame[14] & 0x0F) * 4
    if frame[23] not in (6, 17) or len(frame) < 14 + header + 4:
        return None
    start = 14 + header
    return int.from_bytes(frame[start : start + 2], "big"), int.from_bytes(
        frame[start + 2 : start + 4], "big"
    )


@dataclass
class Block:
    """Frames between ``a`` and ``b`` (None: anyone), on ``port`` (None: all) are dropped."""

    a: str
    b: str | None
    port: int | None
    dropped: int = 0

    def matches(self, src: str, dst: str, frame: bytes) -> bool:
        pair = {src, dst}
        if self.a not in pair or (self.b is not None and pair != {self.a, self.b}):
            return False
        if self.port is None:
            return True
        ports = ports_of(frame)
        return ports is not None and self.port in ports


@dataclass
class Impair:
    """netem on a host's link, both directions."""

    host: str
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    counts: dict[str, int] = field(
        default_factory=lambda: {"frames": 0, "lost": 0, "duplicated": 0, "reordered": 0}
    )

    def delays(self, rng: random.Random) -> list[float]:
        """Seconds until each copy of a frame is delivered (empty: lost)."""
        self.counts["frames"] += 1
        if rng.random() < self.loss:
            self.counts["lost"] += 1
            return []
        copies = 2 if rng.random() < self.duplicate else 1
        self.counts["duplicated"] += copies - 1
        out = []
        for _ in range(copies):
            if rng.random() < self.reorder:
                self.counts["reordered"] += 1
                out.append(0.0)
            else:
                out.append(max(0.0, rng.gauss(self.delay_ms, self.jitter_ms)) / 1000)
        return out


class Switch:
    """A learning switch over TAP fds, applying the rules to each frame it forwards."""

    def __init__(self, taps: dict[str, int], seed: int) -> None:
        self.taps = taps
        self.host_of = {fd: host for host, fd in taps.items()}
        self.macs: dict[bytes, str] = {}
        self.blocks: dict[str, Block] = {}
        self.impairs: dict[str, Impair] = {}
        self.rng = random.Random(seed)
        self.pending: list[tuple[float, int, str, bytes]] = []
        self.sequence = itertools.count()
        self.forwarded = 0
        self.overflow = 0

    # --- forwarding ---------------------------------------------------------------------------

    def receive(self, fd: int) -> None:
        src = self.host_of[fd]
        for _ in range(256):  # bounded: other hosts get their turn
            try:
                frame = os.read(fd, MAX_FRAME)
            except BlockingIOError:
                return
            except OSError:
                return  # the device went away (teardown)
            if len(frame) < 14:
                continue
            self.macs[frame[6:12]] = src
            known = self.macs.get(frame[0:6])
            targets = [known] if known is not None else [h for h in self.taps if h != src]
            for dst in targets:
                if dst != src:
                    self.route(src, dst, frame)

    def route(self, src: str, dst: str, frame: bytes) -> None:
        for block in self.blocks.values():
            if block.matches(src, dst, frame):
                block.dropped += 1
                return
        impair = next(
            (i for i in self.impairs.values() if i.host in (src, dst)), None
        )  # one impairment per frame: the first rule naming either end
        if impair is None:
            self.send(dst, frame)
            return
        now = time.monotonic()
        for delay in impair.delays(self.rng):
            if delay <= 0:
                self.send(dst, frame)
            else:
                heapq.heappush(self.pending, (now + delay, next(self.sequence), dst, frame))

    def send(self, dst: str, frame: bytes) -> None:
        try:
            os.write(self.taps[dst], frame)
            self.forwarded += 1
        except (BlockingIOError, OSError):
            self.overflow += 1  # the host's queue is full or its device is gone: a lost frame

    def flush(self) -> float | None:
        """Deliver the delayed frames that are due; seconds until the next one (None: none)."""
        now = time.monotonic()
        while self.pending and self.pending[0][0] <= now:
            _, _, dst, frame = heapq.heappop(self.pending)
            self.send(dst, frame)
        return max(0.0, self.pending[0][0] - now) if self.pending else None

    # --- control ------------------------------------------------------------------------------

    def command(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "block":
            self.blocks[request["id"]] = Block(request["a"], request.get("b"), request.get("port"))
        elif op == "impair":
            fields = {
                k: request[k]
                for k in ("delay_ms", "jitter_ms", "loss", "duplicate", "reorder")
                if k in request
            }
            self.impairs[request["id"]] = Impair(request["host"], **fields)
        elif op == "heal":
            gone = self.blocks.pop(request["id"], None) or self.impairs.pop(request["id"], None)
            if gone is None:
                return {"ok": False, "error": f"no rule {request['id']!r}"}
            return {"ok": True, "rule": request["id"], **self._stats_of(gone)}
        elif op == "stats":
            return {
                "ok": True,
                "forwarded": self.forwarded,
                "overflow": self.overflow,
                "rules": {
                    **{k: self._stats_of(v) for k, v in self.blocks.items()},
                    **{k: self._stats_of(v) for k, v in self.impairs.items()},
                },
            }
        elif op == "quit":
            return {"ok": True, "quit": True}
        else:
            return {"ok": False, "error": f"unknown op {op!r}"}
        return {"ok": True}

    @staticmethod
    def _stats_of(rule: Block | Impair) -> dict[str, Any]:
        if isinstance(rule, Block):
            return {"dropped": rule.dropped}
        return dict(rule.counts)


def serve(switch: Switch) -> None:
    """Forward frames and answer commands until ``quit`` or stdin closes."""
    poller = select.epoll()
    for fd in switch.taps.values():
        poller.register(fd, select.EPOLLIN)
    control = sys.stdin.fileno()
    os.set_blocking(control, False)
    poller.register(control, select.EPOLLIN)
    buffer = b""
    while True:
        wait = switch.flush()
        for fd, _ in poller.poll(-1 if wait is None else wait):
            if fd != control:
                switch.receive(fd)
                continue
            chunk = os.read(control, 65536)
            if not chunk:
                return
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if not line.strip():
                    continue
                try:
                    reply = switch.command(json.loads(line))
                except (KeyError, TypeError, ValueError) as err:
                    reply = {"ok": False, "error": f"{type(err).__name__}: {err}"}
                print(json.dumps(reply), flush=True)
                if reply.get("quit"):
                    return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("hosts", nargs="+", help="NAMESPACE=HOST pairs")
    parser.add_argument("--seed", type=int, default=0, help="seed of the loss/delay draws")
    args = parser.parse_args(argv)
    taps = {}
    for pair in args.hosts:
        namespace, host = pair.split("=", 1)
        taps[host] = open_tap(namespace)
    print(json.dumps({"ready": True, "hosts": sorted(taps)}), flush=True)
    serve(Switch(taps, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
