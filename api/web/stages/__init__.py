"""Web sections of evaluation stages on the model page, one module per stage.

Each module names its ``STAGE``, its template partial (``TEMPLATE``, under ``templates/``) and a
``context(results)`` function; ``sections`` returns those of the stages a submission's benchmark
runs, so adding a stage's section touches only its own module and partial. A module may also
give the compare page a section: ``COMPARE_TEMPLATE`` and ``compare_context(entries)``
(``compare_sections``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from api.schemas.benchmark import BenchmarkPublic
from api.schemas.result import ResultsPublic
from models.stages import registry


@dataclass(frozen=True)
class Section:
    """One stage's section: the partial to include and its variables."""

    stage: str
    template: str
    context: dict[str, Any]


def _modules() -> list[ModuleType]:
    return [
        importlib.import_module(f"{__name__}.{info.name}")
        for info in pkgutil.iter_modules(__path__)
    ]


def sections(results: ResultsPublic, benchmark: BenchmarkPublic) -> list[Section]:
    """The sections of the stages this benchmark runs (or that left a result), in stage order."""
    by_stage = {module.STAGE: module for module in _modules()}
    stored = {s.stage for s in results.stages}
    out = []
    for stage in registry.all_stages():
        module = by_stage.get(stage.name)
        if module is None or (stage.name not in benchmark.stages and stage.name not in stored):
            continue
        out.append(Section(stage.name, module.TEMPLATE, module.context(results)))
    return out


def compare_sections(
    entries: Sequence[ResultsPublic],
    benchmark: BenchmarkPublic,
    records_of: Callable[[int, str], Path | None] | None = None,
) -> list[Section]:
    """The compare-page sections of the stages that have one, when the benchmark runs the stage
    or a compared entry has its result (context empty: the partial says what is missing).
    ``records_of(submission id, stage)`` finds a stage's per-image records (paired tests)."""
    by_stage = {module.STAGE: module for module in _modules()}
    stored = {s.stage for entry in entries for s in entry.stages}
    out = []
    for stage in registry.all_stages():
        module = by_stage.get(stage.name)
        if module is None or not hasattr(module, "compare_context"):
            continue
        if stage.name not in benchmark.stages and stage.name not in stored:
            continue
        context = module.compare_context(entries, records_of)
        out.append(Section(stage.name, module.COMPARE_TEMPLATE, context))
    return out


def data_pins_rows(results: ResultsPublic) -> list[dict[str, Any]]:
    """The rows of the model page's "Data this result was computed on": one per test set
    (certification), then one per other stage that read images (its units share them)."""
    rows = [
        {"unit": row.unit, "hashes": row.data_hashes}
        for row in results.stages
        if row.stage == "certification" and row.data_hashes
    ]
    stages: dict[str, dict[str, Any]] = {}
    names = {stage.name for stage in registry.all_stages()}
    for row in results.stages:
        if row.stage != "certification" and row.data_hashes:
            title = registry.get(row.stage).title if row.stage in names else row.stage
            stages.setdefault(row.stage, {"unit": f"{title}: images", "hashes": row.data_hashes})
    return rows + list(stages.values())
