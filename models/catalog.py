"""Benchmarks are data: versioned definition files (JSON or YAML) loaded into the database.

A definition names the base dataset, the allowed smoothing σ values, the test sets (dataset repo or
local folder, config, revision, image subset, spectral band) and the certification protocol
(n0, n, α, seed, subset). Its ``protocol.version`` is stored with every result, so changing the
protocol means a new version and results stay comparable only within one version.

The packaged definitions live in ``models/definitions/``; ``certbench benchmarks load FILE`` loads
any other file. Loading is an upsert keyed by name: a newer ``version`` replaces the test sets
(refused while results exist for a test set that would disappear).
"""

from __future__ import annotations

import hashlib
import json
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models.data_pins import DataPin, merged_pin, pinned_revision
from models.entities import Benchmark, StageResult, Submission, TestSet
from models.errors import BenchmarkDefinitionError, NotFoundError

Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")]
Band = Literal["low", "mid", "high"]


class Protocol(BaseModel):
    """Certification protocol (Cohen et al. CERTIFY) and the image subset of every test set."""

    model_config = ConfigDict(extra="forbid")

    version: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")]
    n0: int = Field(default=100, gt=0)
    n: int = Field(default=100_000, gt=0)
    alpha: float = Field(default=0.001, gt=0, lt=0.5)
    seed: int = Field(default=0, ge=0)
    skip: int = Field(default=20, gt=0)
    limit: int | None = Field(default=None, gt=0)


class ImageSource(BaseModel):
    """Where a set of images comes from and which of them count: every ``skip``-th of
    ``source_size`` (the protocol's skip by default), then the first ``limit``. ``folder`` (a
    local Hub-layout folder) wins over ``repo`` when set. ``provenance`` pins the bytes
    (``models.data_pins``): a test set's adds to the definition's defaults; a stage block's
    (the images a stage reads) stands alone."""

    model_config = ConfigDict(extra="forbid")

    repo: str = Field(min_length=1, max_length=128)
    folder: str | None = None
    config: str | None = None
    revision: str | None = None
    split: str = "test"
    source_size: int = Field(default=10_000, gt=0)
    skip: int | None = Field(default=None, gt=0)
    limit: int | None = Field(default=None, gt=0)
    provenance: DataPin | None = Field(
        default=None,
        description="how these images were made and their content hash / Hub commit "
        "(see models.data_pins)",
    )

    @model_validator(mode="after")
    def _revision_agrees_with_pin(self) -> ImageSource:
        """A pinned Hub commit and an explicit revision must agree."""
        if self.provenance is not None:
            pinned_revision(
                self.revision, self.provenance.model_dump(exclude_none=True), name=self.repo
            )
        return self

    def subset(self, protocol: Protocol) -> tuple[int, int | None, int]:
        """(skip, limit, number of images) with the protocol's defaults filled in."""
        skip = self.skip or protocol.skip
        limit = self.limit if self.limit is not None else protocol.limit
        count = -(-self.source_size // skip)
        return skip, limit, min(count, limit) if limit is not None else count


class TestSetDefinition(ImageSource):
    """One test set of a benchmark."""

    __test__ = False

    name: Name
    band: Band | None = None
    attributes: dict[str, Any] = Field(default_factory=dict)

    def num_images(self, protocol: Protocol) -> int:
        """Images certified."""
        return self.subset(protocol)[2]


class BenchmarkDefinition(BaseModel):
    """A benchmark definition file (``format: certbench-benchmark/1``)."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["certbench-benchmark/1"]
    name: Name
    version: int = Field(ge=1)
    title: str = Field(min_length=1, max_length=128)
    description: str = ""
    base_dataset: str = Field(min_length=1, max_length=64)
    num_classes: int = Field(gt=1)
    sigmas: list[Annotated[float, Field(gt=0)]] = Field(min_length=1)
    protocol: Protocol
    bands: dict[Band, list[str]] = Field(default_factory=dict)
    test_sets: list[TestSetDefinition] = Field(min_length=1)
    stages: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="evaluation stages beyond certification: stage name → its protocol block",
    )
    provenance: DataPin | None = Field(
        default=None,
        description="provenance shared by every test set (generator, protocol, seed, source); "
        "each test set's own `provenance` adds to it (its content hash)",
    )

    @model_validator(mode="before")
    @classmethod
    def _legacy_robustness(cls, data: Any) -> Any:
        """Definitions written before the stage registry name the PD stage ``robustness``."""
        if isinstance(data, dict) and "robustness" in data:
            data = dict(data)
            block = data.pop("robustness")
            if block is not None:
                stages = dict(data.get("stages") or {})
                if "pd_robustness" in stages:
                    raise ValueError(
                        "give the PD stage once: `stages.pd_robustness` or `robustness`"
                    )
                stages["pd_robustness"] = block
                data["stages"] = stages
        return data

    @model_validator(mode="after")
    def _known_stages(self) -> BenchmarkDefinition:
        """Each block is validated by its registered stage's protocol model (stored normalised)."""
        from models.stages import registry

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
        from models.stages import registry

        if name not in self.stages:
            return None
        model = registry.get(name).protocol_model
        return None if model is None else model.model_validate(self.stages[name])

    @model_validator(mode="after")
    def _consistent_pins(self) -> BenchmarkDefinition:
        """A pinned Hub commit and an explicit revision must agree."""
        for test_set in self.test_sets:
            pinned_revision(
                test_set.revision,
                merged_pin(self.provenance, test_set.provenance),
                name=test_set.name,
            )
        return self

    @model_validator(mode="after")
    def _unique_names(self) -> BenchmarkDefinition:
        names = [t.name for t in self.test_sets]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"test set names must be unique; repeated: {duplicates}")
        return self


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
    """The definitions shipped in ``models/definitions/`` (CIFAR-10/100 clean, -C, -C̄, -F)."""
    folder = files("models") / "definitions"
    return [
        parse_definition(entry.read_text(encoding="utf-8"), source=entry.name)
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith((".json", ".yaml", ".yml"))
    ]


def definition_sha256(definition: BenchmarkDefinition) -> str:
    """Content hash of a definition, stored to tell whether a reload changed anything."""
    canonical = json.dumps(definition.model_dump(mode="json"), sort_keys=True)
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
    from models.stages import registry

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
        raise NotFoundError(f"benchmark {name!r} does not exist; known benchmarks: {known}")
    return benchmark


def list_benchmarks(session: Session) -> list[Benchmark]:
    """Every benchmark, by name."""
    return list(session.scalars(select(Benchmark).order_by(Benchmark.name)))
