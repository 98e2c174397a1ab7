"""End to end: token → upload over HTTP → a real worker certifies → leaderboard and records."""

from __future__ import annotations

import io
import time

import httpx
import pyarrow.parquet as pq
import pytest

from certbench.smoothing.metrics import acr
from certbench.smoothing.records import table_to_records
from tests.support import timing
from tests.support.flow import put_benchmark, submit, wait_state
from tests.support.processes import wait_for
from tests.support.workers import TEST_SETS, manifest, tiny_model, weights_bytes

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.memory(gib=1.5)]


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

    board = httpx.get(f"{stack.base}/api/v1/leaderboards/tiny", timeout=timing.seconds(30))
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


def test_robustness_stage_runs_on_the_real_worker_and_reaches_the_leaderboard(stack, tmp_path):
    put_benchmark(stack, "robust-dataset", name="robust", robustness=True)
    rosa = stack.submitter("rosa")
    response = submit(rosa, weights_bytes(tiny_model(seed=2), tmp_path), manifest("robust"))
    assert response.status_code == 202, response.text
    sid = response.json()["id"]
    done = wait_state(rosa, sid, {"finished"}, services=stack.services())
    assert done["shards_done"] == done["shards_total"] == 2 * len(TEST_SETS) + 2
    robust = rosa.get(f"/api/v1/results/{sid}").json()["robustness"]
    assert robust is not None and robust["count"] == 2
    assert robust["protocol"]["anchors"] == "tiny_k2_s0.safetensors"
    assert len(robust["protocol"]["anchors_sha256"]) == 64 and "folder" not in robust["protocol"]
    bank = stack.root / "data" / "artifacts" / "anchors" / "tiny_k2_s0.safetensors"
    assert bank.is_file()  # built by the worker from the training split on first use
    for tag in ("8", "16"):
        linf, pd = robust[f"linf_acc_{tag}"], robust[f"pd_acc_{tag}"]
        assert linf <= pd <= robust["base_accuracy"]
    board = httpx.get(f"{stack.base}/api/v1/leaderboards/robust", timeout=timing.seconds(30)).json()
    (row,) = [r for r in board["rows"] if r["submission_id"] == sid]
    assert row["metrics"]["pd_acc_8"] == robust["pd_acc_8"]
    assert row["metrics"]["base_accuracy"] == robust["base_accuracy"]


def test_cancel_stops_the_remaining_shards(stack, tmp_path):
    put_benchmark(stack, "cancel-dataset", name="cancel", n=400)
    frank = stack.submitter("frank")
    response = submit(frank, weights_bytes(tiny_model(seed=8), tmp_path), manifest("cancel"))
    assert response.status_code == 202, response.text
    sid = response.json()["id"]

    def started() -> dict | None:
        body = frank.get(f"/api/v1/submissions/{sid}").json()
        assert body["state"] != "finished", "the run finished before it could be cancelled"
        return body if body["state"] == "running" and body["shards_done"] >= 1 else None

    at_cancel = wait_for(started, timeout=400, what="a first shard", services=stack.services())
    cancelled = frank.post(f"/api/v1/submissions/{sid}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "cancelled"
    # The shard in flight stops at its next record check; queued shards are skipped.
    time.sleep(3 * 2 + 5)
    after = frank.get(f"/api/v1/submissions/{sid}").json()
    assert after["state"] == "cancelled"
    # counted from the cancel's own answer: a 1-image shard may finish between the poll above
    # and the cancel, and at most the one in flight may still land after it
    baseline = cancelled.json()["shards_done"]
    assert at_cancel["shards_done"] <= baseline <= after["shards_done"] <= baseline + 1
    assert after["shards_done"] < after["shards_total"]
    assert frank.get(f"/api/v1/results/{sid}").json()["results"] == []
    assert stack.worker.alive()
