"""An upload goes down the layers once (issue 32 §2): the API enters ``models.submissions`` with
one call, ``intake.submit``, no module of that package is entered twice, and the quota is
decided once in the transaction that creates the submission (plus the early refusal before the
body is read, the same function: ``test_quotas_are_checked_before_the_body_is_read``).

The calls are traced in every thread (the intake runs in a worker thread of the server's event
loop), so the test sees how the code is entered whatever its import style.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from api.main import create_app
from models.core.settings import Settings
from models.db.entities import Submission
from tests.support.api import Actors
from tests.support.service_factories import manifest, multipart, weights_bytes

URL = "/api/v1/submissions"
PACKAGE = "models.submissions."
#: Packages whose frames count as callers; library frames (anyio, SQLAlchemy, Starlette) between
#: a caller and a callee are skipped over.
PROJECT = ("api.", "models.", "workers.", "certbench.", "tests.")
QUOTA_MODULES = {"models.submissions.quotas", "models.submissions.compute_quota"}
#: Where the route shapes its answer (the read every submission endpoint shares).
ANSWER = ("api.services.submissions", "public")


@dataclass
class Trace:
    """Calls into ``models.submissions`` from outside it, and the upload's timeline."""

    entries: list[tuple[str, str, bool]] = field(default_factory=list)
    """(module, function, made while shaping the answer)"""
    timeline: list[tuple[Any, ...]] = field(default_factory=list)
    """quota calls from outside the quota modules, the body read and the user's row lock"""


def _module(frame: FrameType) -> str:
    return frame.f_globals.get("__name__", "")


def _caller(frame: FrameType) -> FrameType | None:
    """The nearest project frame below ``frame`` on its thread's stack (None: the thread's
    root, e.g. a worker thread the API handed a call to)."""
    back = frame.f_back
    while back is not None and not _module(back).startswith(PROJECT):
        back = back.f_back
    return back


def _module_function(frame: FrameType) -> bool:
    """Whether ``frame`` runs a function defined at its module's top level (not a method of a
    value type, a nested function, a lambda or a comprehension)."""
    defined = frame.f_globals.get(frame.f_code.co_name)
    return getattr(defined, "__code__", None) is frame.f_code


def _answering(frame: FrameType | None) -> bool:
    """Whether the route is shaping its answer (``ANSWER`` is on the stack)."""
    while frame is not None:
        if (_module(frame), frame.f_code.co_name) == ANSWER:
            return True
        frame = frame.f_back
    return False


def _record(trace: Trace, frame: FrameType) -> None:
    if not _module_function(frame):
        return
    module, name = _module(frame), frame.f_code.co_name
    caller = _caller(frame)
    caller_module = _module(caller) if caller is not None else ""
    if module == "api.services.upload_stream" and name == "receive_upload":
        trace.timeline.append(("receive_upload",))
    if not module.startswith(PACKAGE):
        return
    if module in QUOTA_MODULES and caller_module not in QUOTA_MODULES:
        arguments = frame.f_locals
        trace.timeline.append(
            (f"{module}.{name}", arguments.get("flops"), arguments.get("before_upload"))
        )
    if (module, name) == ("models.submissions.intake", "lock_user"):
        trace.timeline.append(("lock_user",))
    if not caller_module.startswith(PACKAGE):
        trace.entries.append((module, name, _answering(caller)))


@contextmanager
def traced(trace: Trace, active: threading.Event) -> Iterator[None]:
    """Trace calls in this thread and every thread started inside (the test client's event loop
    and its worker threads) while ``active`` is set."""

    def hook(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and active.is_set():
            _record(trace, frame)

    threading.setprofile(hook)
    sys.setprofile(hook)
    try:
        yield
    finally:
        sys.setprofile(None)
        threading.setprofile(None)


def _post(settings: Settings, headers: dict[str, str], document: dict | bytes) -> tuple[Any, Trace]:
    trace, active = Trace(), threading.Event()
    with traced(trace, active), TestClient(create_app(settings)) as client:
        active.set()
        response = client.post(URL, headers=headers, **multipart(weights_bytes(), document))
        active.clear()
    return response, trace


def test_an_upload_enters_models_submissions_once(settings: Settings, actors: Actors, session):
    response, trace = _post(settings, actors.alice, manifest())
    assert response.status_code == 202, response.text
    upload = [f"{module}.{name}" for module, name, answer in trace.entries if not answer]
    assert upload == ["models.submissions.intake.submit"]
    entered = Counter(module for module, _, _ in trace.entries)
    assert all(count == 1 for count in entered.values()), entered
    estimate, per_sample = session.execute(
        select(Submission.estimated_forward_passes, Submission.flops_per_sample).where(
            Submission.id == response.json()["id"]
        )
    ).one()
    assert estimate is not None and estimate > 0 and per_sample > 0
    decide = "models.submissions.quotas.decide"
    assert trace.timeline == [
        (decide, None, True),  # the early refusal: before the body is read
        ("receive_upload",),
        ("lock_user",),  # the intake transaction holds the user's row from here
        (decide, estimate * per_sample, False),  # the decision, once, inside that transaction
    ]


def test_a_refused_upload_is_counted_without_a_second_entry(
    settings: Settings, actors: Actors, session
):
    response, trace = _post(settings, actors.alice, b"{not json")
    assert response.status_code == 422 and response.json()["code"] == "bad_manifest"
    assert [(module, name) for module, name, _ in trace.entries] == [
        ("models.submissions.intake", "submit")
    ]
    assert trace.timeline == [("models.submissions.quotas.decide", None, True), ("receive_upload",)]
    assert session.scalar(select(Submission.id)) is None


def test_a_duplicate_is_free_so_the_transaction_decides_no_quota(
    settings: Settings, actors: Actors
):
    with TestClient(create_app(settings)) as client:
        first = client.post(URL, headers=actors.alice, **multipart(weights_bytes(), manifest()))
    assert first.status_code == 202, first.text
    response, trace = _post(settings, actors.alice, manifest())
    assert response.status_code == 200 and response.json()["state"] == "duplicate"
    upload = [f"{module}.{name}" for module, name, answer in trace.entries if not answer]
    assert upload == ["models.submissions.intake.submit"]
    assert trace.timeline == [
        ("models.submissions.quotas.decide", None, True),
        ("receive_upload",),
        ("lock_user",),  # the original is found under the lock: no quota to decide
    ]
