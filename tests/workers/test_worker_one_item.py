"""Each task reads its submission's ``WorkItem`` once and passes it on (issue 32 §2).

Every ``get_work_item`` call is traced (by its code object, so every import of it is seen) while
the inline worker runs one task message at a time through a whole pipeline, a redelivered
``validate`` and a redelivered shard included.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from models.db.states import SubmissionState
from models.stages import work
from models.submissions import lifecycle as pipeline
from tests.support.workers import create_submission, manifest, tiny_model, weights_bytes
from workers.app import app
from workers.names import AGGREGATE, RUN_SHARD, VALIDATE


@contextmanager
def reads(callers: Counter[str]) -> Iterator[None]:
    """Count ``get_work_item`` calls by the module that made them."""

    def hook(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is work.get_work_item.__code__:
            back = frame.f_back
            callers[back.f_globals.get("__name__", "") if back is not None else ""] += 1

    sys.setprofile(hook)
    try:
        yield
    finally:
        sys.setprofile(None)


def test_every_task_reads_its_work_item_once(settings, session, benchmark, worker, tmp_path):
    weights = weights_bytes(tiny_model(), tmp_path / "upload")
    sid = create_submission(session, settings, weights=weights, manifest_doc=manifest())
    app.send_task(VALIDATE, args=[sid])
    seen: Counter[str] = Counter()
    while (message := worker.take()) is not None:
        callers: Counter[str] = Counter()
        with reads(callers):
            outcome = str(worker.execute(message))
        # a duplicate message, or one for a submission that moved on: nothing to read
        idle = outcome == "already recorded" or outcome.startswith("skipped: submission")
        expected = Counter() if idle else Counter({"workers.tasks": 1})
        assert callers == expected, (message, outcome, callers)
        seen[message.name] += 1
        if message.name == VALIDATE and seen[VALIDATE] == 1:
            app.send_task(VALIDATE, args=[sid])  # redelivered after dispatch: dispatches again
        if message.name == RUN_SHARD and seen[RUN_SHARD] == 1:
            app.send_task(RUN_SHARD, args=message.args)  # a duplicate shard message
    assert seen[VALIDATE] == 2 and seen[RUN_SHARD] > 1 and seen[AGGREGATE] >= 1
    session.expire_all()
    assert pipeline.get_state(session, sid) == SubmissionState.FINISHED
