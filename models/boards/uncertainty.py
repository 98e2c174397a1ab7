"""Storing the uncertainty of every stage's figures, the same way for a fresh aggregate and for
``certbench results backfill-intervals``.

After a stage's ``merge`` the pipeline asks ``Stage.uncertainty`` for the 95 % intervals of its
figures and the per-image terms of their paired tests, from the merged records alone (no model
is run). Where they go, as for certification (``models.stages.certification.intervals``):

- bounds: metric values ``<key>_ci_low``/``<key>_ci_high`` beside the figure, written in the
  same transaction and dropped with it on a rerun; every REST reader of metrics gets them;
- terms: one small parquet file per entry and stage, ``records/<submission>/<folder>/_terms``
  (``certbench.stats.terms.terms_table``), read when a leaderboard page marks ties or two
  entries are compared, instead of every records file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from models.core.settings import Settings
from models.stages.base import TERMS_UNIT, Stage, StageOutcome, Uncertainty
from models.submissions import storage


def terms_relpath(stage: Stage, submission_id: int) -> str:
    """Where a stage's per-image terms of one entry are stored (relative to the artifacts)."""
    return storage.test_set_records_relpath(submission_id, stage.folder(TERMS_UNIT))


def compute(
    stage: Stage, protocol: Mapping[str, Any] | None, records: Mapping[str, Path]
) -> Uncertainty | None:
    """The stage's uncertainty from its merged records (unit → file); None if it has none."""
    return stage.uncertainty(protocol, records) if stage.has_intervals else None


def write_terms(
    stage: Stage, submission_id: int, found: Uncertainty, *, settings: Settings
) -> None:
    """Write (atomically) or remove the entry's terms file of the stage."""
    from certbench.smoothing import write_table_atomic

    path = storage.resolve(settings.artifacts_dir, terms_relpath(stage, submission_id))
    if found.terms is None:
        path.unlink(missing_ok=True)
    else:
        write_table_atomic(found.terms, path)


def with_uncertainty(
    stage: Stage,
    protocol: Mapping[str, Any] | None,
    outcome: StageOutcome,
    *,
    submission_id: int,
    settings: Settings,
) -> StageOutcome:
    """The merged outcome with the bounds of its figures added, its terms file written."""
    records = {
        r.unit: storage.resolve(settings.artifacts_dir, r.records_path) for r in outcome.results
    }
    found = compute(stage, protocol, records)
    if found is None:
        return outcome
    write_terms(stage, submission_id, found, settings=settings)
    return replace(outcome, metrics={**outcome.metrics, **found.bounds()})
