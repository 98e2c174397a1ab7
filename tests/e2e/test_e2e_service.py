"""End to end: token → upload over HTTP → a real worker certifies → leaderboard and records."""

from __future__ import annotations

import io

import httpx
import pyarrow.parquet as pq
import pytest
from flow import submit, wait_state
from support import TEST_SETS, manifest, tiny_model, weights_bytes

from certbench.metrics import acr
from certbench.records import table_to_records

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_submission_is_certified_ranked_and_its_records_downloadable(stack, tiny, tmp_path):
    bob = stack.submitter("bob")
    response = submit(bob, weights_bytes(tiny_model(seed=1), tmp_path), manifest())
    assert response.status_code == 202, response.text
    sid = response.json()["id"]
    assert response.json()["state"] == "submitted"

    done = wait_state(bob, sid, {"finished"}, services=stack.services())
    assert done["progress"] == 1.0
    assert done["shards_done"] == done["shards_total"] == 2 * len(TEST_SETS)
    moves = [event["to_state"] for event in done["events"]]
    assert moves == ["submitted", "validating", "queued", "running", "finished"]
    assert done["heartbeat_at"] is not None and done["started_at"] is not None

    board = httpx.get(f"{stack.base}/api/v1/leaderboards/tiny", timeout=30)
    assert board.status_code == 200, board.text
    rows = [row for row in board.json()["rows"] if row["submission_id"] == sid]
    assert len(rows) == 1 and rows[0]["model_name"] == "tiny resnet20"

    results = bob.get(f"/api/v1/results/{sid}")
    assert results.status_code == 200, results.text
    per_set = {r["test_set"]: r for r in results.json()["results"]}
    assert sorted(per_set) == sorted(TEST_SETS)
    for result in per_set.values():
        download = bob.get(result["records_url"])
        assert download.status_code == 200, download.text
        records = table_to_records(pq.read_table(io.BytesIO(download.content)))
        assert [r.index for r in records] == [0, 2]  # every 2nd of 4 source images
        assert result["count"] == len(records)
        assert result["acr"] == pytest.approx(acr(records))
        assert all(r.n == 16 and r.n0 == 4 and r.sigma == 0.25 for r in records)
    macr = sum(r["acr"] for r in per_set.values()) / len(per_set)
    assert rows[0]["metrics"]["macr"] == pytest.approx(macr)
