"""The API process does not load torch until it checks an upload (issue 27 §2): an idle API held
0.8–0.95 GB, most of it torch imported by modules that only needed a manifest schema, a record
reader or a name list. Nor SciPy or Alembic, which are needed only by analysis pages, figures'
statistics and the readiness check, and took 2.5 of the 7 s every API process spent importing
the app (serve's processes, each test that starts one). Checked in a fresh interpreter, since the
test process has them loaded."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.support import timing

PROBE = textwrap.dedent(
    """
    import sys, tempfile
    import api.main
    from api.main import create_app
    from models.core.settings import Settings

    create_app(Settings(data_dir=tempfile.mkdtemp(), environment="test"))
    heavy = sorted(
        m for m in ("torch", "torchvision", "safetensors.torch", "scipy", "alembic")
        if m in sys.modules
    )
    print(",".join(heavy) or "none")
    """
)


def test_importing_and_building_the_app_loads_no_torch_scipy_or_alembic():
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=timing.seconds(300),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "none", done.stdout
