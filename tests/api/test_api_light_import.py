"""The API process does not load torch until it checks an upload (issue 27 §2): an idle API held
0.8–0.95 GB, most of it torch imported by modules that only needed a manifest schema, a record
reader or a name list. Checked in a fresh interpreter, since the test process has torch loaded."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent(
    """
    import sys, tempfile
    import api.main
    from api.main import create_app
    from models.settings import Settings

    create_app(Settings(data_dir=tempfile.mkdtemp(), environment="test"))
    heavy = sorted(m for m in ("torch", "torchvision", "safetensors.torch") if m in sys.modules)
    print(",".join(heavy) or "none")
    """
)


def test_importing_and_building_the_app_loads_no_torch():
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "none", done.stdout
