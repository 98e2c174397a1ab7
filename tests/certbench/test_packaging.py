"""The wheel ships what users of the package rely on: the ``py.typed`` marker (PEP 561), so that
a type checker reads the annotations of ``certbench.client`` and ``certbench.client.zoo`` in a
project that installs certbench, and the client's modules themselves.

Built for real with ``uv build --offline`` (hatchling comes from uv's cache, where ``uv sync``
put it when it built this project), since what counts is what the build backend selects, not
what lies in the source tree.
"""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

from tests.support import timing

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_carries_the_typing_marker_and_the_client(tmp_path: Path) -> None:
    uv = shutil.which("uv")
    assert uv is not None, "uv is needed to build the wheel (the project is run with uv)"
    built = subprocess.run(
        [uv, "build", "--wheel", "--offline", "--out-dir", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=timing.seconds(300),
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("certbench-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "certbench/py.typed" in names
    assert {
        "certbench/client/__init__.py",
        "certbench/client/types.py",
        "certbench/client/zoo.py",
    } <= names
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    assert "Classifier: Typing :: Typed" in zipfile.ZipFile(wheel).read(metadata).decode()
