"""The types, checked: mypy over the code with the configuration in ``pyproject.toml``
(``[tool.mypy]``: every function of ``certbench/`` annotated), 0 errors.

mypy keeps its incremental cache in ``.mypy_cache/`` (git-ignored): the first run on a checkout
checks every module (about a minute of one core), later runs only what changed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import timing

pytestmark = pytest.mark.memory(gib=1.75)

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("certbench", "models", "api", "workers", "generators")

#: A cold run (no cache) takes about a minute of one core on the reference machine; the deadline
#: leaves room for a slower machine and scales with a loaded one (``tests.support.timing``).
DEADLINE_SECONDS = 300


@pytest.mark.slow
def test_mypy_finds_no_errors():
    run = subprocess.run(
        [sys.executable, "-m", "mypy", *CHECKED],
        cwd=ROOT, capture_output=True, text=True, timeout=timing.seconds(DEADLINE_SECONDS),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
