"""A certification result as stored and as read back: the summary ``merge`` stores for each test
set (``stored_summary``) and its typed read (``TestSetResult``, what the REST schema and the
leaderboard's per-test-set table use), side by side so the two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from models.db.entities import StageResult, TestSet

if TYPE_CHECKING:
    import pyarrow as pa


def stored_summary(summary: Any, protocol_version: str, table: pa.Table) -> dict[str, Any]:
    """The JSON summary of one test set's merged records (``summary``: what
    ``certbench.smoothing.summarize`` gives) with its figures' 95 % intervals over the images
    (``table``: the records as a table)."""
    from models.stages.certification.intervals import set_intervals

    return {
        "acr": summary.acr,
        "certified_accuracy": {f"{r:g}": v for r, v in summary.certified_accuracy.items()},
        "clean_accuracy": summary.clean_accuracy,
        "abstain_rate": summary.abstain_rate,
        "pa_median": summary.pa_median,
        "pa_quantiles": {f"{q:g}": v for q, v in summary.pa_quantiles.items()},
        "protocol_version": protocol_version,
        "intervals": set_intervals(table),
    }


@dataclass(frozen=True)
class TestSetResult:
    """A stored certification result of one test set, read as typed fields."""

    __test__ = False

    id: int
    submission_id: int
    test_set: TestSet
    acr: float
    certified_accuracy: dict[str, float]
    clean_accuracy: float
    abstain_rate: float
    pa_median: float
    pa_quantiles: dict[str, float]
    count: int
    seconds: float
    protocol_version: str
    evaluator_version: str
    records_path: str
    intervals: dict[str, Any] = field(default_factory=dict)
    """95 % intervals of the figures (``FigureIntervals.to_dict``); empty before backfill."""

    @property
    def test_set_id(self) -> int:
        return self.test_set.id

    @classmethod
    def of(cls, row: StageResult, test_set: TestSet) -> TestSetResult:
        summary = row.summary
        return cls(
            id=row.id,
            submission_id=row.submission_id,
            test_set=test_set,
            acr=summary["acr"],
            certified_accuracy=dict(summary["certified_accuracy"]),
            clean_accuracy=summary["clean_accuracy"],
            abstain_rate=summary["abstain_rate"],
            pa_median=summary["pa_median"],
            pa_quantiles=dict(summary["pa_quantiles"]),
            count=row.count,
            seconds=row.seconds,
            protocol_version=summary["protocol_version"],
            evaluator_version=row.evaluator_version,
            records_path=row.records_path,
            intervals=dict(summary.get("intervals") or {}),
        )
