"""The embedded worker silences Celery's "running as root" SecurityWarning, and only that
warning (issue 25 §4); ``tests/api/test_api_serve_processes.py`` checks ``serve``'s output."""

from __future__ import annotations

import os
import warnings

import pytest
from celery.platforms import check_privileges

from workers.commands import quiet_root_warning


def _root_warnings(monkeypatch: pytest.MonkeyPatch, *, quiet: bool) -> list[str]:
    for name in ("getuid", "geteuid"):
        monkeypatch.setattr(os, name, lambda: 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if quiet:
            quiet_root_warning()
        check_privileges(["json"])
        warnings.warn("another warning", UserWarning, stacklevel=1)
    return [str(w.message) for w in caught]


def test_celery_warns_a_root_worker(monkeypatch: pytest.MonkeyPatch):
    messages = _root_warnings(monkeypatch, quiet=False)
    assert any("superuser privileges" in m for m in messages), messages


def test_the_embedded_worker_silences_only_that_warning(monkeypatch: pytest.MonkeyPatch):
    messages = _root_warnings(monkeypatch, quiet=True)
    assert messages == ["another warning"]


def test_pickle_as_root_is_still_refused(monkeypatch: pytest.MonkeyPatch):
    from celery.exceptions import SecurityError

    for name in ("getuid", "geteuid"):
        monkeypatch.setattr(os, name, lambda: 0)
    monkeypatch.delenv("C_FORCE_ROOT", raising=False)
    with warnings.catch_warnings(), pytest.raises(SecurityError):
        quiet_root_warning()
        check_privileges(["pickle"])
