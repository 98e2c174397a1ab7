"""Safetensors files an attacker crafts (issue 35 §4), for the intake and validation tests."""

from __future__ import annotations

import json
import struct


def with_duplicate(blob: bytes, *, other_offsets: bool) -> bytes:
    """``blob`` (safetensors) with its first tensor named once more at the head of the header:
    at the same offsets (a JSON reader that keeps one entry sees a valid file) or at those of
    the next tensor of its dtype and size (the entry a reader keeps decides which bytes load)."""
    (length,) = struct.unpack("<Q", blob[:8])
    header = blob[8 : 8 + length].decode()
    entries = json.loads(header)
    names = [name for name in entries if name != "__metadata__"]
    first = entries[names[0]]
    entry = dict(first)
    if other_offsets:
        twin = next(n for n in names[1:] if entries[n]["shape"] == first["shape"])
        entry["data_offsets"] = entries[twin]["data_offsets"]
    duplicate = json.dumps({names[0]: entry})[1:-1]
    raw = ("{" + duplicate + "," + header.lstrip()[1:]).encode()
    return struct.pack("<Q", len(raw)) + raw + blob[8 + length :]
