"""Turn recorded robustness shards into a submission's ``RobustnessResult``.

The aggregate step merges the per-image ``RobustnessReport`` shards of the clean subset (seed 004
§6: clean, ℓ∞ and ℓ∞ ∩ PD at each ε), writes the merged parquet file and stores the figures;
like ``models.results.aggregate_test_set`` it is idempotent, so a redelivered aggregate finds the
row in place. Figures come from ``certbench.attacks.RobustnessReport``, never from the model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy.orm import Session

from certbench.attacks import RobustnessReport
from certbench.errors import ThreatModelError
from models import storage
from models.entities import RobustnessResult
from models.errors import StorageError
from models.pipeline import (
    check_shards_complete,
    finished_robustness_shards,
    get_submission,
    robustness_spec,
)
from models.settings import Settings

#: Leaderboard columns filled from a robustness result, by ε in units of 1/255.
COLUMNS = {8: ("linf_acc_8", "pd_acc_8"), 16: ("linf_acc_16", "pd_acc_16")}


def aggregate_robustness(
    session: Session, submission_id: int, *, evaluator_version: str, settings: Settings
) -> RobustnessResult | None:
    """Merge the robustness shards and store the result; None for a benchmark without the stage.

    Returns the stored row if there is one already. Raises StorageError when shards are missing
    or a records file is gone or unreadable.
    """
    existing = session.get(RobustnessResult, submission_id)
    if existing is not None:
        return existing
    submission = get_submission(session, submission_id)
    spec = robustness_spec(submission.benchmark.robustness, settings)
    if spec is None:
        return None
    shards = finished_robustness_shards(session, submission_id)
    check_shards_complete(
        shards, spec.images.num_images, what="the robustness subset", settings=settings
    )
    paths = [storage.resolve(settings.artifacts_dir, s.records_path) for s in shards]
    banks = {shard_metadata(path).get("anchors_sha256") for path in paths}
    if len(banks) != 1:
        raise StorageError(
            f"the robustness shards of submission {submission_id} were attacked with different "
            f"anchor banks ({sorted(map(str, banks))}); re-run the submission fresh"
        )
    report = RobustnessReport.merge([_read(path) for path in paths])
    relpath = storage.robustness_records_relpath(submission_id)
    report.write(
        storage.resolve(settings.artifacts_dir, relpath),
        metadata={
            "submission_id": str(submission_id),
            "benchmark": submission.benchmark.name,
            "evaluator_version": evaluator_version,
        },
    )
    figures = report.summary()
    protocol: dict[str, Any] = {**spec.describe(), "anchors_sha256": banks.pop()}
    result = RobustnessResult(
        submission_id=submission_id,
        evaluator_version=evaluator_version,
        protocol=protocol,
        base_accuracy=figures["clean_accuracy"],
        figures=figures,
        count=int(figures["count"]),
        seconds=float(sum(s.seconds for s in shards)),
        records_path=relpath,
        **leaderboard_columns(figures),
    )
    session.add(result)
    session.commit()
    return result


def leaderboard_columns(figures: dict[str, float]) -> dict[str, float | None]:
    """The ε columns of the leaderboard (None where the protocol did not attack at that ε)."""
    out: dict[str, float | None] = {}
    for eps, (linf, pd) in COLUMNS.items():
        out[linf] = figures.get(f"linf_robust_accuracy_{eps}")
        out[pd] = figures.get(f"pd_robust_accuracy_{eps}")
    return out


def shard_metadata(path: Path) -> dict[str, str]:
    """The key/value metadata a worker wrote into a robustness shard's parquet schema."""
    try:
        raw = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowInvalid) as err:
        raise StorageError(f"robustness shard {str(path)!r} is unreadable: {err}") from err
    return {k.decode(): v.decode() for k, v in raw.items()}


def _read(path: Path) -> RobustnessReport:
    try:
        return RobustnessReport.read(path)
    except ThreatModelError as err:
        raise StorageError(f"robustness shard {str(path)!r}: {err}") from err
