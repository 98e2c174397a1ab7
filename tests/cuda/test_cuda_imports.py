"""The CUDA tests and scripts/gpu-check import only what the GPU image has (issue 28).

The device's python3 holds torch 2.11, numpy, scipy, safetensors, pyarrow, tqdm,
huggingface_hub, pytest and lazy_loader, but no pydantic, fastapi, sqlalchemy, celery, redis or
datasets. This runs in CI (no GPU needed): a subprocess blocks those packages with a meta-path
finder and imports every module the CUDA tests and gpu-check import.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import timing

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # a subprocess that imports torch and runs for a minute
ABSENT_ON_THE_GPU_IMAGE = (
    "pydantic", "pydantic_settings", "pydantic_core", "fastapi", "sqlalchemy", "celery",
    "redis", "datasets", "alembic", "psycopg", "uvicorn", "multipart", "fastapi_offline",
    "vl_convert", "kombu",
)  # fmt: skip
OURS = ("certbench", "generators", "scripts", "tests")


def imported_modules() -> set[str]:
    """``module`` and ``module:name`` of every import of ours in tests/cuda and gpu_check, and
    the suite's conftest."""
    files = [
        *ROOT.joinpath("tests/cuda").glob("*.py"),
        *ROOT.joinpath("scripts/gpu_check").glob("*.py"),
    ]
    found: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(OURS):
                found |= {f"{node.module}:{alias.name}" for alias in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith(OURS)}
    # pytest loads the suite's conftest.py too when gpu-check runs tests/cuda on the GPU image
    return found | {"tests.conftest"}


def probe_env() -> dict[str, str]:
    """A bare environment, as on the GPU image, but with the test run's byte-code cache
    (``scripts/test``'s ``PYTHONPYCACHEPREFIX``): without it the probe compiled torch's modules
    again, the one process of the suite that did (this test with a fresh virtual environment:
    9.6 s → 3.9 s of CPU)."""
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    for name in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


PROBE = """
import importlib, importlib.abc, sys
blocked = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"{name} is not on the GPU image")
sys.meta_path.insert(0, Block())
for item in sys.argv[2:]:
    module, _, name = item.partition(":")
    loaded = importlib.import_module(module)
    if name and not hasattr(loaded, name):
        importlib.import_module(f"{module}.{name}")  # a submodule: from package import module
print("imported", len(sys.argv) - 2)
"""


def test_the_cuda_tests_and_gpu_check_import_without_the_service_packages():
    modules = sorted(imported_modules())
    assert any(m.startswith("certbench.smoothing") for m in modules)
    assert any(m.startswith("scripts.gpu_check") for m in modules)
    run = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(ABSENT_ON_THE_GPU_IMAGE), *modules],
        cwd=ROOT, env=probe_env(), capture_output=True, text=True, timeout=timing.seconds(300),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"imported {len(modules)}" in run.stdout


def test_the_probe_would_notice_a_service_import():
    run = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(ABSENT_ON_THE_GPU_IMAGE), "certbench.nets:Manifest"],
        cwd=ROOT, env=probe_env(), capture_output=True, text=True, timeout=timing.seconds(300),
    )  # fmt: skip
    assert run.returncode != 0 and "not on the GPU image" in run.stderr
