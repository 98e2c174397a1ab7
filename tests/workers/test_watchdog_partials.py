"""The watchdog's sweep also removes partial weights files a killed upload left (issue 19 §7)."""

from __future__ import annotations

import os
import time

from models.submissions.artifacts import INCOMING_DIR
from workers.app import app
from workers.watchdog import sweep


def test_sweep_removes_stale_partial_uploads(settings):
    incoming = settings.artifacts_dir / INCOMING_DIR
    incoming.mkdir(parents=True)
    stale, live = incoming / ".upload-dead.tmp", incoming / ".upload-live.tmp"
    stale.write_bytes(b"\0" * 1024)
    live.write_bytes(b"\0" * 1024)
    old = time.time() - settings.partial_upload_grace_seconds - 60
    os.utime(stale, (old, old))
    assert sweep(settings, app) == []
    assert not stale.exists() and live.exists()
