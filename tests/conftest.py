"""Suite-wide: the test files that take longest start first.

pytest-xdist (``--dist loadfile``, scripts/test) hands whole files to its test processes in the
order it is given; by default it reorders them by their number of tests, which put the files of
one or two long tests (the README's first run, the demo's references, ``serve``: one to two
minutes each) last, where they ran side by side after every short file was done and the suite
waited on them. scripts/test passes ``--no-loadscope-reorder`` and this hook puts the files with
a ``slow`` test first (those that also start real processes, ``integration``, before the rest),
keeping the collection's order otherwise, so the short files fill in around them.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def _rank(item: pytest.Item) -> int:
    """0: slow and starts real processes (integration); 1: slow; 2: the rest."""
    slow = item.get_closest_marker("slow") is not None
    return 2 - slow - (slow and item.get_closest_marker("integration") is not None)


def _ranks(items: list[pytest.Item]) -> dict[Path, int]:
    """Each file's rank: that of its most demanding test."""
    rank: dict[Path, int] = {}
    for item in items:
        rank[item.path] = min(rank.get(item.path, 2), _rank(item))
    return rank


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = _ranks(items)
    items.sort(key=lambda item: rank[item.path])  # stable: each file's tests stay in order
