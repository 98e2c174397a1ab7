"""No 5xx after the documented upgrade path (issue 27 §3): a benchmark definition that gains a
stage (``certbench benchmarks load v2.json``) leaves the entries finished before without that
stage's figures. Every page renders against such a database: the new figures read "not
measured", with how an operator measures them, and sorting by a new figure works."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.schemas.benchmark import BenchmarkPublic
from api.web.leaderboard_view import metric_columns
from models.catalog.benchmarks import get_benchmark
from models.db.engine import session_scope
from models.stages.certification.cost import COST_GROUP
from tests.support.web import Site


@pytest.fixture
def anonymous(client: TestClient) -> TestClient:
    client.cookies.clear()
    return client


def _new_keys(site: Site) -> list[str]:
    with session_scope(site.settings) as session:
        bench = BenchmarkPublic.of(get_benchmark(session, "webup"), entries=0)
    # certification's own columns (accuracy, cost) exist before the upgrade
    keys = [c.key for c in metric_columns(bench) if c.group not in {"certified", COST_GROUP}]
    assert keys, "webup v2 adds the Fourier sensitivity stage's columns"
    return keys


def test_every_page_renders_after_a_stage_is_added(anonymous: TestClient, site: Site) -> None:
    ids = site.seeded.entries["webup"]
    new = _new_keys(site)
    pages = [
        "/",
        "/datasets",
        "/datasets/certbench/web-clean",
        "/leaderboards/webup",
        *(f"/leaderboards/webup?sort={key}" for key in new),
        *(f"/leaderboards/webup?sort={key}&order=asc" for key in new),
        *(f"/models/{sid}" for sid in ids.values()),
        f"/compare?id={ids['Alpha']}&id={ids['Bravo']}",
        "/analysis/webup",
    ]
    for path in pages:
        response = anonymous.get(path)
        assert response.status_code < 500, f"{path}: {response.status_code}\n{response.text[-800:]}"
    board = anonymous.get("/leaderboards/webup").text
    cell = board[board.index(f'<td class="num metric group-start" data-key="{new[0]}"') :]
    cell = cell[: cell.index("</td>")]
    assert "not measured" in cell and "/api/v1/admin/submissions/" in cell and "rerun" in cell
    model = anonymous.get(f"/models/{ids['Alpha']}").text
    assert "Not computed for this entry" in model and "rerun" in model
    compare = anonymous.get(f"/compare?id={ids['Alpha']}&id={ids['Bravo']}").text
    row = compare[compare.index(f'<tr data-key="{new[0]}"') :].split("</tr>")[0]
    assert "not measured" in row
    for fmt in ("latex", "csv", "bibtex"):
        export = anonymous.get(
            "/api/v1/leaderboards/webup/export", params={"format": fmt, "sort": new[0]}
        )
        assert export.status_code == 200, export.text
