"""Fixtures for the worker tests: a migrated SQLite service, the tiny benchmark, an inline worker.

``InlineWorker`` consumes the real Celery messages the tasks publish (kombu's in-memory
transport, JSON-serialised exactly as on Redis) and executes them in this process one at a time,
so the tests can stop between any two tasks, drop messages (a lost worker) or deliver one twice.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from sqlalchemy.orm import Session

from models.core.settings import Settings, get_settings
from models.db.engine import dispose_engines, session_scope
from tests.support.service_db import MigratedTemplates, templates
from tests.support.workers import load_benchmark, tiny_definition, write_tiny_dataset
from workers.app import app
from workers.names import QUEUES


@dataclass(frozen=True)
class Message:
    """A task message taken off the in-memory broker."""

    name: str
    args: list[object]
    queue: str


class InlineWorker:
    """Runs queued task messages in-process, control queue first (as a worker prefers them)."""

    def __init__(self) -> None:
        self.ran: list[tuple[Message, object]] = []

    def take(self) -> Message | None:
        """Remove and return the next message, or None when every queue is empty."""
        with app.connection_for_read() as connection:
            for queue in QUEUES:
                simple = connection.SimpleQueue(queue)
                try:
                    message = simple.get(block=False)
                except simple.Empty:
                    simple.close()
                    continue
                message.ack()
                simple.close()
                args, _kwargs, _embed = message.payload
                return Message(message.headers["task"], list(args), queue)
        return None

    def pending(self) -> list[Message]:
        """All queued messages (taken off and put back in order)."""
        messages = []
        while (message := self.take()) is not None:
            messages.append(message)
        for message in messages:
            app.send_task(message.name, args=message.args, queue=message.queue)
        return messages

    def execute(self, message: Message) -> object:
        """Run one message as a worker would (task_always_eager is not involved)."""
        outcome = app.tasks[message.name].apply(args=message.args).get(propagate=True)
        self.ran.append((message, outcome))
        return outcome

    def run_next(self) -> object:
        message = self.take()
        if message is None:
            raise AssertionError("no message queued")
        return self.execute(message)

    def run_all(self, limit: int = 200) -> int:
        """Run messages until the queues are empty; returns how many ran."""
        count = 0
        while (message := self.take()) is not None:
            self.execute(message)
            count += 1
            if count > limit:
                raise AssertionError(f"more than {limit} task messages: a dispatch loop?")
        return count

    def purge(self) -> int:
        """Drop every queued message (what a killed in-memory broker would lose)."""
        return len([m for m in iter(self.take, None)])


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread() -> None:
    """The CI box has 2 shared cores: one intra-op thread is several times faster there."""
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MigratedTemplates]:
    """One SQLite database migrated to head per session, copied for each test (running the
    migrations per test cost about half a second of each test's set-up)."""
    with templates(tmp_path_factory.mktemp("templates")) as cache:
        yield cache


@pytest.fixture
def settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, migrated: MigratedTemplates
) -> Iterator[Settings]:
    """A fresh SQLite service under tmp_path, migrated to head (a copy of the session's migrated
    database), with 1-image shards on CPU."""
    monkeypatch.setenv("CERTBENCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("CERTBENCH_DATABASE_URL", raising=False)
    monkeypatch.setenv("CERTBENCH_BROKER_URL", "memory://")
    monkeypatch.setenv("CERTBENCH_SHARD_SIZE", "1")
    monkeypatch.setenv("CERTBENCH_WORKER_DEVICE", "cpu")
    monkeypatch.setenv("CERTBENCH_CANCEL_CHECK_SECONDS", "0.001")
    get_settings.cache_clear()
    current = get_settings()
    current.data_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(migrated.sqlite_file(), current.data_dir / "certbench.db")
    yield current
    get_settings.cache_clear()
    dispose_engines()


@pytest.fixture
def session(settings: Settings) -> Iterator[Session]:
    with session_scope(settings) as db:
        yield db


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return write_tiny_dataset(tmp_path / "tiny-dataset")


@pytest.fixture
def benchmark(session: Session, dataset: Path) -> str:
    load_benchmark(session, tiny_definition(dataset))
    return "tiny"


@pytest.fixture
def worker() -> Iterator[InlineWorker]:
    app.loader.import_default_modules()  # registers workers.tasks, as a starting worker does
    inline = InlineWorker()
    inline.purge()
    yield inline
    inline.purge()
