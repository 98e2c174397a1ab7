"""Benchmarks are data: versioned definition files (JSON or YAML) loaded into the database.

A definition names the base dataset, the allowed smoothing σ values, the test sets (dataset repo or
local folder, config, revision, image subset, spectral band) and the certification protocol
(n0, n, α, seed, subset). Its ``protocol.version`` is stored with every result, so changing the
protocol means a new version and results stay comparable only within one version.

The packaged definitions live in ``models/catalog/definitions/``; ``certbench benchmarks load FILE``
loads any other file. Loading is an upsert keyed by name: a newer ``version`` replaces the test sets
(refused while results exist for a test set that would disappear).
"""

from __future__ import annotations

import difflib
import hashlib
import json
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError, model_validator
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models.benchmarks.data_pins import merged_pin
from models.benchmarks.definitions import BenchmarkSchema
from models.core.errors import BenchmarkDefinitionError, NotFoundError
from models.db.entities import Benchmark, StageResult, Submission, TestSet
from models.stages import registry


class BenchmarkDefinition(BenchmarkSchema):
    """A benchmark definition file whose stage blocks are each validated (and stored
    normalised) by their registered stage's protocol model."""

    @model_validator(mode="after")
    def _known_stages(self) -> BenchmarkDefinition:
        """Each block is validated by its registered stage's protocol model (stored normalised)."""
        for name, block in self.stages.items():
            try:
                stage = registry.get(name)
            except BenchmarkDefinitionError as err:
                raise ValueError(str(err)) from err
            if stage.protocol_model is None:
                raise ValueError(f"stage {name!r} takes no definition block")
            try:
                parsed = stage.protocol_model.model_validate(block)
            except ValidationError as err:
                raise ValueError(f"stages.{name}: {err}") from err
            self.stages[name] = parsed.model_dump(mode="json", exclude_unset=False)
        return self

    @property
    def robustness(self) -> BaseModel | None:
        """The PD robustness stage's block (None without that stage)."""
        return self.stage_block("pd_robustness")

    def stage_block(self, name: str) -> BaseModel | None:
        """The validated protocol block of stage ``name`` (None when the benchmark lacks it)."""
        if name not in self.stages:
            return None
        model = registry.get(name).protocol_model
        return None if model is None else model.model_validate(self.stages[name])


def parse_definition(text: str, *, source: str = "<text>") -> BenchmarkDefinition:
    """Parse and validate a JSON or YAML definition. Raises BenchmarkDefinitionError."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise BenchmarkDefinitionError(f"{source}: not valid JSON/YAML: {err}") from err
    try:
        return BenchmarkDefinition.model_validate(data)
    except ValidationError as err:
        raise BenchmarkDefinitionError(f"{source}: invalid benchmark definition:\n{err}") from err


def load_definition(path: str | Path) -> BenchmarkDefinition:
    """Read a definition file. Raises BenchmarkDefinitionError for a missing or invalid file."""
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as err:
        raise BenchmarkDefinitionError(
            f"benchmark definition {str(source)!r} cannot be read: {err}"
        ) from err
    return parse_definition(text, source=str(source))


def packaged_definitions() -> list[BenchmarkDefinition]:
    """The definitions shipped in ``models/catalog/definitions/`` (CIFAR-10/100 clean, -C, -C̄,
    -F)."""
    folder = files("models.catalog") / "definitions"
    return [
        parse_definition(entry.read_text(encoding="utf-8"), source=entry.name)
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith((".json", ".yaml", ".yml"))
    ]


def definition_sha256(definition: BenchmarkDefinition) -> str:
    """Content hash of a definition, stored to tell whether a reload changed anything.

    ``limits`` counts only when the file sets it: a definition written before the caps existed
    keeps its hash (and its version loads again unchanged)."""
    document = definition.model_dump(mode="json")
    if "limits" not in definition.model_fields_set:
        document.pop("limits")
    canonical = json.dumps(document, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def upsert_benchmark(session: Session, definition: BenchmarkDefinition) -> Benchmark:
    """Insert or update the benchmark named in ``definition`` and its test sets.

    Refuses (BenchmarkDefinitionError) an older version than the stored one, the same version
    with different content, or dropping a test set that already has results.
    """
    digest = definition_sha256(definition)
    benchmark = session.scalar(select(Benchmark).where(Benchmark.name == definition.name))
    if benchmark is not None:
        if benchmark.definition_sha256 == digest:
            return benchmark
        if definition.version <= benchmark.definition_version:
            raise BenchmarkDefinitionError(
                f"benchmark {definition.name!r} version {benchmark.definition_version} is loaded "
                f"with different content; the new file says version {definition.version}: "
                "increase `version` when you change a definition"
            )
    else:
        benchmark = Benchmark(name=definition.name)
        session.add(benchmark)
    _apply(session, benchmark, definition, digest)
    session.commit()
    return benchmark


def _apply(
    session: Session, benchmark: Benchmark, definition: BenchmarkDefinition, digest: str
) -> None:
    protocol = definition.protocol
    benchmark.title = definition.title
    benchmark.description = definition.description
    benchmark.base_dataset = definition.base_dataset
    benchmark.num_classes = definition.num_classes
    benchmark.sigmas = list(definition.sigmas)
    benchmark.definition_version = definition.version
    benchmark.definition_sha256 = digest
    benchmark.protocol_version = protocol.version
    benchmark.n0, benchmark.n, benchmark.alpha = protocol.n0, protocol.n, protocol.alpha
    benchmark.seed = protocol.seed
    benchmark.bands = {band: list(names) for band, names in definition.bands.items()}
    benchmark.stages = _stage_rows(definition)
    benchmark.limits = definition.limits.model_dump(mode="json")
    existing = {ts.name: ts for ts in benchmark.test_sets}
    wanted = {t.name for t in definition.test_sets}
    for name, test_set in existing.items():
        if name not in wanted:
            if benchmark.id is not None and _has_results(session, test_set):
                raise BenchmarkDefinitionError(
                    f"benchmark {definition.name!r}: test set {name!r} has results and cannot be "
                    "removed; keep it in the definition or create a new benchmark name"
                )
            benchmark.test_sets.remove(test_set)
    for position, spec in enumerate(definition.test_sets):
        test_set = existing.get(spec.name) or TestSet(name=spec.name)
        test_set.position = position
        test_set.dataset_repo = spec.repo
        test_set.dataset_folder = spec.folder
        test_set.config = spec.config
        test_set.revision = spec.revision
        test_set.split = spec.split
        test_set.subset_skip = spec.skip or protocol.skip
        test_set.subset_limit = spec.limit if spec.limit is not None else protocol.limit
        test_set.num_images = spec.num_images(protocol)
        test_set.band = spec.band
        test_set.attributes = dict(spec.attributes)
        test_set.provenance = merged_pin(definition.provenance, spec.provenance)
        if spec.name not in existing:
            benchmark.test_sets.append(test_set)


def _stage_rows(definition: BenchmarkDefinition) -> dict[str, Any]:
    """The stage protocols as stored: each stage's own row (definition fields + derived ones)."""
    rows = {}
    for name in definition.stages:
        block = definition.stage_block(name)
        assert block is not None  # validated by _known_stages
        rows[name] = registry.get(name).protocol_row(block, definition)
    return rows


def _has_results(session: Session, test_set: TestSet) -> bool:
    """Whether a certification result was stored for this test set (its unit)."""
    return bool(
        session.scalar(
            select(func.count())
            .select_from(StageResult)
            .join(Submission, Submission.id == StageResult.submission_id)
            .where(
                Submission.benchmark_id == test_set.benchmark_id,
                StageResult.stage == "certification",
                StageResult.unit == test_set.name,
            )
        )
    )


def get_benchmark(session: Session, name: str) -> Benchmark:
    """The benchmark called ``name``. Raises NotFoundError listing the known names."""
    benchmark = session.scalar(select(Benchmark).where(Benchmark.name == name))
    if benchmark is None:
        known = list(session.scalars(select(Benchmark.name).order_by(Benchmark.name)))
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        raise NotFoundError(f"benchmark {name!r} does not exist; {hint}known benchmarks: {known}")
    return benchmark


def list_benchmarks(session: Session) -> list[Benchmark]:
    """Every benchmark, by name."""
    return list(session.scalars(select(Benchmark).order_by(Benchmark.name)))
