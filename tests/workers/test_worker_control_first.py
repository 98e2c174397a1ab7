"""Control work never waits behind another submission's shards, on the embedded stack (issue 34
§1: two reference entries had recorded all their shards by 01:38 and 01:46 and appeared at 01:53;
``submit --wait`` sat 9 min 40 s at "waiting for validation").

A real ``certbench worker --embedded`` (the worker ``certbench serve`` starts) over the SQLite
transport runs the three submissions of ``tests.support.control_first``: each later one's
validation must begin, and each one must be on the board, within one shard's duration of being
submitted and of recording its last shard. ``tests/e2e/test_e2e_control_first.py`` does the same
over Redis and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import migrations
from models.core.settings import Settings
from models.db.engine import dispose_engines
from tests.support import control_first
from tests.support.processes import Service, service_env, start_worker

pytestmark = [pytest.mark.slow, pytest.mark.memory(gib=1.25)]


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[tuple[Settings, Service]]:
    env = service_env(CERTBENCH_DATA_DIR=str(tmp_path / "data"), **control_first.ENV)
    settings = Settings(data_dir=tmp_path / "data", shard_size=1, worker_device="cpu")
    migrations.upgrade(settings)
    control_first.load_slow_benchmark(settings, tmp_path)
    worker = start_worker(env, tmp_path / "worker.log", "--embedded", control_consumer=True)
    yield settings, worker
    worker.stop()
    dispose_engines()


def test_validation_and_aggregation_never_wait_behind_other_shards(embedded, tmp_path):
    settings, worker = embedded
    late = control_first.measure(settings, tmp_path, (worker,))
    assert not late, "\n".join(late)
