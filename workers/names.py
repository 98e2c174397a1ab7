"""Task and queue names.

The names the API also uses (validate, aggregate, the control and default queues) come from
``models.core.queue`` so both sides share one definition; the shard and watchdog tasks are internal
to the workers. Every stage's shards run through ONE task, ``RUN_SHARD``, sent to the queue the
stage declares (``models.stages``), so a deployment routes stages to workers by queue.
"""

from __future__ import annotations

from models.core.queue import CONTROL_QUEUE, DEFAULT_QUEUE, TASK_AGGREGATE, TASK_VALIDATE
from models.stages import registry

QUEUE = DEFAULT_QUEUE
"""Long GPU work (certification shards). Every certbench worker consumes it (one per GPU)."""

ROBUSTNESS_QUEUE = registry.get("pd_robustness").queue
"""Attack shards (APGD with gradients: more memory per image than certification), on their own
queue so a deployment can route them to dedicated workers (``certbench worker --queues``)."""


def queues() -> tuple[str, ...]:
    """What a worker consumes by default: CONTROL_QUEUE (the short validate/aggregate tasks, so a
    new upload is validated without waiting behind hours of shards) and every stage's queue."""
    return (CONTROL_QUEUE, *registry.queues())


QUEUES = queues()

VALIDATE = TASK_VALIDATE
"""args: [submission_id]. Safe-load + dummy forward; queued → shards, or rejected."""

RUN_SHARD = "certbench.run_shard"
"""args: [submission_id, stage, unit, shard_index]. Run one shard of any stage."""

AGGREGATE = TASK_AGGREGATE
"""args: [submission_id]. Merge every stage's shards, store results and the entry, finish."""

WATCHDOG = "certbench.watchdog"
"""args: []. Fail running submissions whose lease expired (also run by a thread in every worker)."""

__all__ = [
    "AGGREGATE",
    "CONTROL_QUEUE",
    "QUEUE",
    "QUEUES",
    "ROBUSTNESS_QUEUE",
    "RUN_SHARD",
    "VALIDATE",
    "WATCHDOG",
]
