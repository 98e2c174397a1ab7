"""Suite-wide: the test files that take longest start first.

pytest-xdist (``--dist loadfile``, scripts/test) hands whole files to its test processes in the
order it is given; by default it reorders them by their number of tests, which put the files of
one or two long tests (the README's first run, the demo's references, ``serve``: one to two
minutes each) last, where they ran side by side after every short file was done and the suite
waited on them. scripts/test passes ``--no-loadscope-reorder`` and this hook puts the files with
a ``slow`` test first (those that also start real processes, ``integration``, before the rest),
keeping the collection's order otherwise, so the short files fill in around them.

It also sets the time scale of the session's waits (``tests.support.timing``): measured once here,
in the controlling process, and handed to pytest-xdist's processes so that all of them wait alike;
and it stretches pytest-timeout's per-test limit (``timeout`` in pyproject.toml) by the same
factor, so that a test that is only slow on a loaded machine is not killed before its own
deadlines, which say what it was waiting for, run out.

It reserves, in a ledger every suite on the machine shares, the memory that a file's tests
declare with the ``memory`` marker for the processes they start (``tests.support.memory``), so
that two suites beside ``certbench serve`` do not start more than the machine holds.

And it holds the one headless Chromium of each test process (``browser``): Playwright's sync API
runs an event loop in the thread for as long as it is open, so a second ``sync_playwright()`` in
the same process failed ("using Playwright Sync API inside the asyncio loop") whenever a file of
``tests/web`` had run before ``tests/docs/test_site.py`` there.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import memory, timing

#: The key under which the controlling process hands the scale to pytest-xdist's processes.
SCALE_KEY = "certbench_time_scale"
#: Each test process's reservations (``tests.support.memory``).
MEMORY = pytest.StashKey[memory.FileMemory]()
#: Why a test could not get its file's reservation; it fails in its setup with this.
NO_MEMORY = pytest.StashKey[str]()


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


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _memory_weights(items: list[pytest.Item]) -> dict[str, float]:
    """Each file's declared memory in GiB: the largest of its tests' ``memory`` markers."""
    weights: dict[str, float] = {}
    for item in items:
        for marker in item.iter_markers("memory"):
            gib = marker.kwargs.get("gib")
            if not isinstance(gib, int | float) or isinstance(gib, bool) or gib <= 0:
                raise pytest.UsageError(f"{item.nodeid}: write pytest.mark.memory(gib=<GiB > 0>)")
            weights[_file(item)] = max(weights.get(_file(item), 0.0), float(gib))
    return weights


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = _ranks(items)
    items.sort(key=lambda item: rank[item.path])  # stable: each file's tests stay in order
    profile = os.environ.get("CERTBENCH_TEST_MEMORY_PROFILE")
    config.stash[MEMORY] = memory.FileMemory(
        _memory_weights(items), Path(profile).resolve() if profile else None
    )


def pytest_configure(config: pytest.Config) -> None:
    """The session's time scale: the controller's (pytest-xdist process), else measured here."""
    handed = getattr(config, "workerinput", {}).get(SCALE_KEY)
    try:
        timing.configure(timing.Scale(**handed) if handed else timing.measure())
        memory.budget_gib()
    except ValueError as err:
        raise pytest.UsageError(str(err)) from err


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Hand the controller's scale to each pytest-xdist process (only with pytest-xdist)."""
    node.workerinput[SCALE_KEY] = timing.current().as_dict()


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [timing.current().describe(), memory.describe()]


def _per_test_limit(config: pytest.Config) -> float | None:
    """pytest-timeout's limit from pyproject.toml, or None when there is none or the command
    line or PYTEST_TIMEOUT set one (an explicit limit is kept as given)."""
    if not config.pluginmanager.hasplugin("timeout") or config.getoption("timeout") is not None:
        return None
    if os.environ.get("PYTEST_TIMEOUT"):
        return None
    configured = config.getini("timeout")
    return float(configured) if configured else None


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Stretch the per-test limit by the time scale when the test starts (before pytest-timeout
    reads it); a test's own ``timeout`` marker is kept as written. And take the file's memory
    reservation, waiting for it before pytest-timeout's clock starts."""
    limit = _per_test_limit(item.config)
    if limit and item.get_closest_marker("timeout") is None:
        item.add_marker(pytest.mark.timeout(timing.seconds(limit)))
    if MEMORY in item.config.stash:
        try:
            item.config.stash[MEMORY].enter(_file(item))
        except TimeoutError as err:
            item.stash[NO_MEMORY] = str(err)
    yield


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if NO_MEMORY in item.stash:
        pytest.fail(item.stash[NO_MEMORY], pytrace=False)


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the file's last test (its module fixtures' processes stopped), give its memory
    back; a file whose processes outgrew their marker gets a warning in the summary."""
    yield
    if MEMORY in item.config.stash:
        note = item.config.stash[MEMORY].leave(_file(item), nextitem and _file(nextitem))
        if note:
            warnings.warn(note, stacklevel=1)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium through Playwright (no Playwright browser download), one per
    test process, for every test that browses."""
    # imported here: the CUDA tests run with this file on a GPU image without the service's
    # packages (tests/cuda/test_cuda_imports.py), and tests.support.web needs them
    from tests.support.web import CHROMIUM, CHROMIUM_ARGS

    if not CHROMIUM.is_file() or shutil.which(str(CHROMIUM)) is None:
        pytest.fail(
            f"Chromium is required for the web browser tests and {CHROMIUM} is missing: run "
            "`apt-get update && apt-get install -y chromium` (Debian package; never "
            "`playwright install`), or set CERTBENCH_CHROMIUM to the binary.",
            pytrace=False,
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield instance
        instance.close()
