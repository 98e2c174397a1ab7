"""Task and queue names: the only thing the API and the workers share about Celery.

The API enqueues ``VALIDATE`` by name (``send_task(VALIDATE, args=[id], queue=CONTROL_QUEUE)``)
with a submission id; everything after that is chained by the workers themselves.
"""

from __future__ import annotations

QUEUE = "certbench"
"""Long GPU work: certify shards. Every certbench worker consumes it (one process per GPU)."""

CONTROL_QUEUE = "certbench.control"
"""Short tasks (validate, aggregate): also consumed by every worker, alternately with ``QUEUE``,
so a new upload is validated (or rejected) without waiting behind hours of queued shards, and a
finished run is aggregated before its lease runs out."""

QUEUES = (CONTROL_QUEUE, QUEUE)

VALIDATE = "certbench.validate"
"""args: [submission_id]. Safe-load + dummy forward; queued → shards, or rejected."""

CERTIFY_SHARD = "certbench.certify_shard"
"""args: [submission_id, test_set_id, shard_index]. CERTIFY one image range of one test set."""

AGGREGATE = "certbench.aggregate"
"""args: [submission_id]. Merge shard records per test set, compute metrics, finish."""

WATCHDOG = "certbench.watchdog"
"""args: []. Fail running submissions whose lease expired (also run by a thread in every worker)."""
