"""One user's rejected upload never breaks another user's run (issue 19 §1), on the real stack:
PostgreSQL, Redis, the API and a real ``certbench worker`` process.

Weights are stored once per content. Alice's ResNet-20 runs; meanwhile Bob uploads the same bytes
with a manifest whose normalisation divides by a denormal std (another manifest, so another
artifact sharing the file; weights that do not fit their architecture are refused at intake since
issue 25, so the worker's rejection comes from the dummy forward pass: non-finite outputs). The
worker rejects Bob's between two of Alice's shards and releases his artifact; the file must stay,
since Alice's run still needs it, and her remaining shards must run on it.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from models.db.engine import session_scope
from models.db.entities import StageShard, SubmissionEvent
from models.submissions import storage
from tests.support.flow import put_benchmark, submit, wait_state
from tests.support.processes import wait_for
from tests.support.workers import TEST_SETS, manifest, tiny_model, weights_bytes

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.memory(gib=1.5)]

N = 2000
"""Samples per image: each shard takes seconds on CPU, so Bob's upload lands mid-run."""


def test_a_rejected_upload_of_the_same_bytes_keeps_the_running_ones_weights(stack, tmp_path):
    put_benchmark(stack, "shared-dataset", name="shared", n=N)
    alice, bob = stack.submitter("alice-shared"), stack.submitter("bob-shared")
    weights = weights_bytes(tiny_model(seed=21), tmp_path)
    first = submit(alice, weights, manifest(benchmark="shared"))
    assert first.status_code == 202, first.text
    sid = first.json()["id"]

    def mid_run() -> dict | None:
        body = alice.get(f"/api/v1/submissions/{sid}").json()
        assert body["state"] != "finished", "finished before the second upload"
        return body if body["state"] == "running" and body["shards_done"] >= 1 else None

    wait_for(mid_run, timeout=400, what="a first shard of alice's run", services=stack.services())
    claim = manifest(benchmark="shared", preprocessing={"mean": [0.5] * 3, "std": [1e-37] * 3})
    second = submit(bob, weights, claim)
    assert second.status_code == 202, second.text
    assert second.json()["weights_sha256"] == first.json()["weights_sha256"]
    rejected = wait_state(
        bob, second.json()["id"], {"rejected"}, services=stack.services(), timeout=400
    )
    assert rejected["reason"] == "non_finite_output"

    done = wait_state(alice, sid, {"finished"}, services=stack.services(), timeout=600)
    assert done["shards_done"] == done["shards_total"] == 2 * len(TEST_SETS)
    path = storage.resolve(
        stack.settings.artifacts_dir, storage.weights_relpath(first.json()["weights_sha256"])
    )
    assert path.read_bytes() == weights
    with session_scope(stack.settings) as session:
        rejected_at = session.scalar(
            select(SubmissionEvent.at).where(
                SubmissionEvent.submission_id == second.json()["id"],
                SubmissionEvent.to_state == "rejected",
            )
        )
        later = session.scalars(
            select(StageShard).where(
                StageShard.submission_id == sid, StageShard.created_at > rejected_at
            )
        ).all()
    assert later, "every shard ran before the rejection: the interleaving was not exercised"
