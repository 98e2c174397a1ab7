"""Control work never waits behind another submission's shards on a distributed stack (issue 34
§1): PostgreSQL, a Redis broker and a real ``certbench worker`` (its control consumer beside it),
running the three submissions of ``tests.support.control_first``. Each later one's validation
must begin, and each one must be on the board, within one shard's duration of being submitted
and of recording its last shard (Redis's round robin over the queues made a control message wait
for one shard of every busy stage queue, as kombu's fair cycle did on the embedded transport).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import migrations
from models.core.settings import Settings
from models.db.engine import dispose_engines
from tests.support import control_first
from tests.support.e2e import postgres_database, redis_database
from tests.support.flow import settings_from_env
from tests.support.processes import Service, service_env, start_worker

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.memory(gib=1.25)]


@pytest.fixture
def distributed(tmp_path: Path) -> Iterator[tuple[Settings, Service]]:
    with postgres_database() as database, redis_database() as broker:
        env = service_env(
            CERTBENCH_DATA_DIR=str(tmp_path / "data"),
            CERTBENCH_DATABASE_URL=database,
            CERTBENCH_BROKER_URL=broker,
            **control_first.ENV,
        )
        settings = settings_from_env(env)
        migrations.upgrade(settings)
        control_first.load_slow_benchmark(settings, tmp_path)
        worker = start_worker(
            env, tmp_path / "worker.log", "--hostname", "cf@%h", control_consumer=True
        )
        try:
            yield settings, worker
        finally:
            worker.stop()
            dispose_engines()


def test_validation_and_aggregation_never_wait_behind_other_shards(distributed, tmp_path):
    settings, worker = distributed
    late = control_first.measure(settings, tmp_path, (worker,))
    assert not late, "\n".join(late)
