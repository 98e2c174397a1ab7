"""Task and queue names.

The names the API also uses (validate, aggregate, the two queues) come from ``models.queue`` so
both sides share one definition; the shard and watchdog tasks are internal to the workers.
The API enqueues ``VALIDATE`` by name with a submission id; everything after that is chained by
the workers themselves.
"""

from __future__ import annotations

from models.queue import CONTROL_QUEUE, DEFAULT_QUEUE, TASK_AGGREGATE, TASK_VALIDATE

QUEUE = DEFAULT_QUEUE
"""Long GPU work: certify shards. Every certbench worker consumes it (one process per GPU)."""

ROBUSTNESS_QUEUE = "certbench.robustness"
"""Attack shards (APGD with gradients: more memory per image than certification), on their own
queue so a deployment can route them to dedicated workers (``certbench worker --queues``)."""

QUEUES = (CONTROL_QUEUE, QUEUE, ROBUSTNESS_QUEUE)
"""What a worker consumes by default; CONTROL_QUEUE holds the short validate/aggregate tasks, so
a new upload is validated without waiting behind hours of queued shards."""

VALIDATE = TASK_VALIDATE
"""args: [submission_id]. Safe-load + dummy forward; queued → shards, or rejected."""

CERTIFY_SHARD = "certbench.certify_shard"
"""args: [submission_id, test_set_id, shard_index]. CERTIFY one image range of one test set."""

ROBUSTNESS_SHARD = "certbench.robustness_shard"
"""args: [submission_id, shard_index]. Clean, ℓ∞ and ℓ∞ ∩ PD robust accuracy of one image range
of the benchmark's clean subset (seed 004), on the base classifier."""

AGGREGATE = TASK_AGGREGATE
"""args: [submission_id]. Merge shard records per test set, compute metrics, finish."""

WATCHDOG = "certbench.watchdog"
"""args: []. Fail running submissions whose lease expired (also run by a thread in every worker)."""

__all__ = [
    "AGGREGATE",
    "CERTIFY_SHARD",
    "CONTROL_QUEUE",
    "QUEUE",
    "QUEUES",
    "ROBUSTNESS_QUEUE",
    "ROBUSTNESS_SHARD",
    "VALIDATE",
    "WATCHDOG",
]
