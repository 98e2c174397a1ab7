"""Helpers of the client tests (their fixtures are in ``tests/client/conftest.py``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from models.core.settings import Settings
from models.db.engine import session_scope
from models.db.entities import Submission
from models.db.states import SubmissionState
from models.submissions import lifecycle as pipeline
from tests.support import timing
from tests.support.service_factories import (
    manifest,
    run_pipeline,
    weights_bytes,
)


@dataclass
class Live:
    """A running server: its URL, settings (database, artifacts) and three users' tokens."""

    url: str
    settings: Settings
    alice: str
    bob: str
    admin: str

    def finish(self, submission_id: int, *, quality: float = 0.5) -> None:
        """Validate, run and aggregate a submission as a worker does (deterministic records)."""
        with session_scope(self.settings) as session:
            run_pipeline(session, submission_id, settings=self.settings, quality=quality)

    def reject(self, submission_id: int) -> None:
        """Reject a submission at validation, as a worker does for weights that do not fit."""
        with session_scope(self.settings) as session:
            pipeline.reject(
                session,
                submission_id,
                reason="state_dict_mismatch",
                message="weights do not fit architecture 'cifar_resnet20'",
                settings=self.settings,
            )

    @contextmanager
    def worker(self, handle: Callable[[int], None]) -> Iterator[None]:
        """A background thread that passes every newly submitted submission to ``handle``
        (``finish`` or ``reject``) while the block runs, as a worker would pick it up."""
        stop = threading.Event()
        failures: list[BaseException] = []

        def loop() -> None:
            try:
                while not stop.wait(0.05):
                    with session_scope(self.settings) as session:
                        waiting = session.scalars(
                            select(Submission.id).where(
                                Submission.state == SubmissionState.SUBMITTED
                            )
                        ).all()
                    for submission_id in waiting:
                        handle(submission_id)
            except BaseException as err:  # reported by the test, never lost
                failures.append(err)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=timing.seconds(30))
        if failures:
            raise failures[0]


def model_files(folder: Path, *, seed: int = 0, **manifest_changes: object) -> tuple[Path, Path]:
    """A real cifar_resnet20 safetensors file and its manifest for the tiny benchmark."""
    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / f"model-{seed}.safetensors"
    weights.write_bytes(weights_bytes(seed))
    document = manifest(name=f"resnet20 seed {seed}") | manifest_changes
    path = folder / f"manifest-{seed}.json"
    path.write_text(json.dumps(document))
    return weights, path
