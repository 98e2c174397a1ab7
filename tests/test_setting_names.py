"""Every ``CERTBENCH_*`` name the code's docstrings, the README and the docs mention is one the
code reads (issue 27 §5: the watchdog's docstring named its interval setting without the
``_INTERVAL`` that ``CERTBENCH_WATCHDOG_INTERVAL_SECONDS`` has, a name nothing reads)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from models.core.settings import RETIRED_VARIABLES, Settings
from models.stages import registry
from workers.config import WorkerSettings

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"CERTBENCH_[A-Z0-9_]+")

#: Variables that are not service settings (client, CLI limits, tests, tools;
#: ``CERTBENCH_SERVICES`` is a test's constant), and the file that reads each (checked below, so
#: this list cannot hide a misspelt name).
OTHER_VARIABLES = {
    "CERTBENCH_SERVER": "certbench/client/config.py",
    "CERTBENCH_TOKEN": "certbench/client/config.py",
    "CERTBENCH_CONFIG": "certbench/client/config.py",
    "CERTBENCH_CACHE_DIR": "certbench/client/zoo.py",
    "CERTBENCH_STAGE_PLUGINS": "models/stages/registry.py",
    "CERTBENCH_CHROMIUM": "benchmarks/web_figures.py",
    "CERTBENCH_TEST_POSTGRES_URL": "tests/support/service_db.py",
    "CERTBENCH_TEST_REDIS_DB": "tests/support/api.py",
    "CERTBENCH_TEST_REDIS_URL": "benchmarks/api_load.py",
    "CERTBENCH_TEST_PROCESSES": "scripts/test",
    "CERTBENCH_TEST_TIME_SCALE": "tests/support/timing.py",
    "CERTBENCH_TEST_MEMORY_GIB": "tests/support/memory.py",
    "CERTBENCH_TEST_MEMORY_PROFILE": "tests/conftest.py",
    "CERTBENCH_SERVICES": "tests/workers/test_compose.py",
    "CERTBENCH_CUDA_TESTS_DEVICE": "tests/support/cuda.py",
    "CERTBENCH_MAX_HOURS": "certbench/cli/budget.py",
    "CERTBENCH_MAX_MEMORY_GB": "certbench/cli/budget.py",
}


def known_names() -> set[str]:
    """The settings classes' fields, each stage's batch-size variable, and the others."""
    fields = {*Settings.model_fields, *WorkerSettings.model_fields}
    names = {f"CERTBENCH_{field.upper()}" for field in fields}
    names |= {stage.batch_size_variable() for stage in registry.all_stages()}
    # retired names the settings refuse by name (models.core.settings.RETIRED_VARIABLES)
    return names | set(OTHER_VARIABLES) | set(RETIRED_VARIABLES)


def mentioned() -> dict[str, list[str]]:
    """``CERTBENCH_*`` name → the tracked .py/.md files (and scripts) that mention it."""
    files = subprocess.run(
        ["git", "ls-files", "*.py", "*.md", "scripts/*", "Dockerfile", "*.yml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found: dict[str, list[str]] = {}
    for name in files:
        path = ROOT / name
        if not path.is_file():
            continue
        for match in set(NAME.findall(path.read_text(encoding="utf-8", errors="replace"))):
            found.setdefault(match, []).append(name)
    return found


def test_every_mentioned_variable_is_read() -> None:
    known = known_names()
    found = mentioned()
    assert "CERTBENCH_WATCHDOG_INTERVAL_SECONDS" in found
    unknown = {
        name: files
        for name, files in found.items()
        if name not in known
        # a prefix split over two strings or written as CERTBENCH_QUOTA_*
        and not (name.endswith("_") and any(k.startswith(name) for k in known))
    }
    assert unknown == {}, (
        f"CERTBENCH_* names nothing reads (fix the text or add the setting): {unknown}"
    )


def test_the_other_variables_are_read_where_listed() -> None:
    """Each listed name is a string literal (or a shell expansion, or a constant's name) in the
    file said to read it, not only a mention in prose."""
    for name, where in OTHER_VARIABLES.items():
        text = (ROOT / where).read_text(encoding="utf-8")
        forms = (f'"{name}"', f"${{{name}", f"{name} = ")
        assert any(form in text for form in forms), f"{name} is not read in {where}"
