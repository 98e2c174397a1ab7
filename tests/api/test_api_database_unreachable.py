"""An API host that cannot reach its database answers 503 with Retry-After, never a 500
(issue 36): reads, writes and pages alike, whether the connection is refused (the database
restarting) or times out (a partition, bounded by ``CERTBENCH_DATABASE_CONNECT_TIMEOUT_SECONDS``
and ``..._TCP_TIMEOUT_SECONDS``). Before, SQLAlchemy's ``OperationalError`` reached the generic
handler: 500 ``internal_error``. Recovering after a real partition heals is shown by
``scripts/fleet-check`` (``api-database-partition``)."""

from __future__ import annotations

import io
import socket
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from models.core.settings import Settings
from models.db.engine import dispose_engines


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def cut_off(tmp_path) -> Iterator[TestClient]:
    """The API with a PostgreSQL URL nothing answers on (connection refused)."""
    settings = Settings(
        data_dir=tmp_path,
        database_url=f"postgresql://certbench@127.0.0.1:{_closed_port()}/certbench",
        database_connect_timeout_seconds=1,
    )
    try:
        with TestClient(create_app(settings), raise_server_exceptions=False) as client:
            yield client
    finally:
        dispose_engines()


REQUESTS = [
    ("GET", "/api/v1/leaderboards/demo-digits"),
    ("GET", "/api/v1/submissions/1"),
    ("GET", "/api/v1/benchmarks"),
    ("POST", "/api/v1/submissions"),
    ("GET", "/"),
]


@pytest.mark.parametrize(("method", "path"), REQUESTS)
def test_an_unreachable_database_is_a_503_with_retry_after(cut_off, method, path):
    files = None
    if method == "POST":
        files = {"weights": ("m.safetensors", io.BytesIO(b"x"), "application/octet-stream"),
                 "manifest": ("manifest.json", b"{}", "application/json")}  # fmt: skip
    response = cut_off.request(
        method, path, headers={"Authorization": "Bearer cb_not_checked_yet"}, files=files
    )
    assert response.status_code == 503, response.text
    assert int(response.headers["retry-after"]) > 0
    body = response.json()
    assert body["code"] == "unavailable" and "database" in body["message"]
    assert "127.0.0.1" not in response.text  # nothing of the deployment's addresses


def test_readiness_names_the_database(cut_off):
    response = cut_off.get("/ready")
    assert response.status_code == 503
    assert response.json()["database"].startswith("unreachable")
