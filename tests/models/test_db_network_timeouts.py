"""PostgreSQL connections of the service carry bounds on every network wait to both ends
(issue 36): this side's libpq timeouts and keepalives, and the server's keepalives, user
timeout and statement limit as session parameters (``models.db.engine.NetworkTimeouts``), set
from ``CERTBENCH_DATABASE_*``. Migrations get no statement limit. What a partition does without
them: tests/fleet/test_partitioned_locks.py."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from models.core.settings import Settings
from models.db.engine import NetworkTimeouts, create_db_engine, dispose_engines, get_engine
from tests.support.service_db import postgres_database

pytestmark = pytest.mark.integration


def _server(engine, name: str) -> str:
    with engine.connect() as connection:
        return str(connection.execute(text(f"SHOW {name}")).scalar())


def test_the_services_engine_sets_the_servers_side_of_every_timeout(tmp_path):
    with postgres_database() as url:
        settings = Settings(
            data_dir=tmp_path,
            database_url=url,
            database_tcp_timeout_seconds=12,
            database_statement_timeout_seconds=90,
        )
        try:
            engine = get_engine(settings)
            assert _server(engine, "tcp_user_timeout") == "12000"  # ms
            assert _server(engine, "tcp_keepalives_idle") == "6"
            assert _server(engine, "tcp_keepalives_interval") == "2"
            assert _server(engine, "tcp_keepalives_count") == "3"
            assert _server(engine, "statement_timeout") == "90s"
            migrations = create_db_engine(url, pooled=False)
            assert _server(migrations, "statement_timeout") == "0"
            assert _server(migrations, "tcp_keepalives_idle") == "5"
            migrations.dispose()
        finally:
            dispose_engines()


def test_the_client_side_bounds_follow_the_tcp_timeout():
    args = NetworkTimeouts(connect=3, tcp=10, statement=0).connect_args()
    assert args["connect_timeout"] == 3 and args["tcp_user_timeout"] == 10_000
    # the keepalives give up after about the TCP timeout: idle + count x interval
    assert args["keepalives_idle"] + args["keepalives_count"] * args["keepalives_interval"] <= 10
    assert "statement_timeout" not in args["options"]


@pytest.mark.parametrize(
    "field", ["database_connect_timeout_seconds", "database_tcp_timeout_seconds"]
)
def test_a_timeout_must_be_positive(field, tmp_path):
    with pytest.raises(ValueError, match=field):
        Settings(data_dir=tmp_path, **{field: 0})
