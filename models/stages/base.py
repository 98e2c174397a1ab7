"""The stage contract: what one evaluation stage declares so the pipeline can run it.

A stage turns a submission into leaderboard figures in three steps the pipeline drives:

1. ``units(item)``: the independent pieces of its work (a certification test set, the clean subset
   a PD attack runs on, ...), each a range of images; the pipeline tiles every unit into shards of
   ``shard_size(settings)`` images and records each shard once under the key
   (submission, stage, unit, shard index).
2. ``run(item, shard, context)``: compute one shard with the ``certbench`` core and write its
   per-image records to ``context.target`` (atomically); return a ``ShardOutput``. Runs on a
   worker under a lease; ``context.on_progress`` reports images done and raises to stop.
3. ``merge(item, shards, context)``: merge every recorded shard into per-unit results and the
   stage's leaderboard metrics (a ``StageOutcome``); idempotent (it only reads shard files and
   writes merged files atomically), the pipeline stores the outcome in one transaction. Then
   ``uncertainty(protocol, merged records)`` gives each figure's 95 % interval (stored as
   ``<key>_ci_low``/``<key>_ci_high`` metric values) and the per-image terms of paired tests.
4. ``estimate(item, settings)``: the forward passes each unit's images cost under the stage's
   protocol (a ``StageEstimate``), known before anything runs: summed at intake (the estimate in
   the 202 response, the compute quota), it weights progress (a cheap stage does not count like
   an expensive one) and turns measured samples/s into an ETA (``models.runs.progress``).

Plus what the service shows: ``metric_specs(benchmark)`` (leaderboard keys, labels, direction,
units) and, optionally, a web section (``api/web/stages/<name>.py`` + a template partial).
A stage's protocol block in benchmark definitions (``stages: {<name>: {...}}``) is the pydantic
model ``protocol_model``, validated when the definition loads.

The plumbing of ``run`` and ``merge`` is the contract's too: what a shard file and a merged file
carry, reading shard files back verified against the run seed's commitment and the data hashes,
and the stored results (``models.stages.shard_files``); the run seed's checks are here
(``run_seed_metadata``, ``check_shard_seed``, ``recorded_data_hashes``), as is a stored protocol
row resolved to the images it reads (``StageSpec``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel

if TYPE_CHECKING:
    import torch

    from models.benchmarks.definitions import BenchmarkSchema
    from models.benchmarks.sources import TestSetSpec
    from models.core.settings import Settings
    from models.stages.work import WorkItem

MetricKind = Literal["percent", "radius", "probability", "number", "seconds", "flops"]
CI_LOW, CI_HIGH = "_ci_low", "_ci_high"
"""Suffixes of a figure's stored 95 % bounds: ``<key>_ci_low`` and ``<key>_ci_high``."""
TERMS_UNIT = "_terms"
"""Unit name of a stage's per-image terms file (``records/<submission>/<folder>/_terms``)."""


@dataclass(frozen=True)
class MetricSpec:
    """One leaderboard figure a stage contributes (stored as a metric value, sortable).

    ``key`` is the REST field and sort key; ``label`` the column header; ``help`` says what it
    measures; ``kind`` how it is formatted (and its unit); ``group`` which table section it sits in.
    """

    key: str
    label: str
    help: str
    kind: MetricKind = "percent"
    higher_is_better: bool = True
    group: str = "certified"
    column: bool = True
    """False for a figure served by REST and sortable but not shown as a leaderboard column."""


@dataclass(frozen=True)
class Unit:
    """An independent piece of a stage's work: ``num_images`` images, sharded by the pipeline."""

    name: str
    num_images: int


@dataclass(frozen=True)
class ShardSpec:
    """Images ``[start, stop)`` of one unit of one stage: the unit of work a worker leases."""

    stage: str
    unit: str
    shard_index: int
    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.stage, self.unit, self.shard_index)

    @property
    def placement(self) -> dict[str, Any]:
        """Where the shard sits, as its file's metadata names it (``shard_metadata``)."""
        return {"unit": self.unit, "shard_index": self.shard_index, "start": self.start,
                "stop": self.stop}  # fmt: skip


@dataclass(frozen=True)
class RecordedShard:
    """A recorded shard as ``merge`` sees it: its range, its records file (absolute), its cost."""

    unit: str
    shard_index: int
    start: int
    stop: int
    count: int
    seconds: float
    path: Path


Shards = Mapping[str, Sequence[RecordedShard]]
"""What ``merge`` is handed: each unit's recorded shards (``models.stages.shard_files`` reads
them back)."""


@dataclass(frozen=True)
class UnitCost:
    """Forward passes of one unit's images, run-length encoded: ``runs`` is a sequence of
    (images, forward passes per image) in image order, so images of different kinds in one
    unit (the Fourier lens' paths and Jacobian images) cost what they cost, and the forward
    passes of any image range (a shard, or the first images of a running shard) are exact
    under the estimate."""

    unit: str
    runs: tuple[tuple[int, int], ...]

    @property
    def images(self) -> int:
        return sum(count for count, _ in self.runs)

    def passes(self, start: int = 0, stop: int | None = None) -> int:
        """Forward passes of images ``[start, stop)`` (default: the whole unit)."""
        stop = self.images if stop is None else stop
        total, position = 0, 0
        for count, per_image in self.runs:
            low, high = max(start, position), min(stop, position + count)
            if high > low:
                total += (high - low) * per_image
            position += count
        return total


@dataclass(frozen=True)
class StageEstimate:
    """The work of one stage for one submission, from its protocol alone.

    ``exact`` is False when a figure is a bound, said in ``note`` (early stops make attacks an
    upper bound; see each stage's ``estimate``). A forward pass is one image through the network;
    an attack's backward passes are not counted (an attack stage's measured samples/s is lower
    for it, which the ETA uses)."""

    stage: str
    units: tuple[UnitCost, ...]
    exact: bool
    basis: str
    """How the figure follows from the protocol ("15 images × (n0 100 + n 1,000)")."""
    note: str = ""

    @property
    def forward_passes(self) -> int:
        return sum(unit.passes() for unit in self.units)

    @property
    def images(self) -> int:
        return sum(unit.images for unit in self.units)

    def unit(self, name: str) -> UnitCost:
        """The cost of the unit called ``name``. Raises KeyError for a unit the stage lacks."""
        for unit in self.units:
            if unit.unit == name:
                return unit
        raise KeyError(f"stage {self.stage!r} has no unit {name!r}")


def per_image(units: Sequence[Unit], passes: int) -> tuple[UnitCost, ...]:
    """Every unit at the same forward passes per image."""
    return tuple(UnitCost(unit.name, ((unit.num_images, passes),)) for unit in units)


@dataclass(frozen=True)
class StageSpec:
    """A stage's stored protocol row resolved against this deployment's folders: the images the
    stage reads (``images``, from ``models.benchmarks.sources.image_source_spec``) and the row
    itself, stored with each result without local paths (``describe``). Stages subclass it with
    their protocol's fields."""

    images: TestSetSpec
    row: dict[str, Any]

    def describe(self) -> dict[str, Any]:
        """The settings stored with a result: the row without local paths."""
        return {key: value for key, value in self.row.items() if key != "folder"}


@dataclass(frozen=True)
class RunContext:
    """What the worker hands ``Stage.run``: where to write, on which device, how big a batch,
    and the lease's progress callback (images done in this shard; raises to stop)."""

    target: Path
    device: torch.device
    batch_size: int
    on_progress: Callable[[int], None]
    settings: Settings


@dataclass(frozen=True)
class ShardOutput:
    """``run``'s result: images computed and the metadata the records file carries."""

    count: int
    metadata: Mapping[str, str] = field(default_factory=dict)
    noun: str = "image(s)"
    """How the task's outcome names what was done ("image(s) attacked")."""


@dataclass(frozen=True)
class MergeContext:
    """What ``merge`` may use: the evaluator version and where merged records go."""

    evaluator_version: str
    target_for: Callable[[str], tuple[str, Path]]
    """unit name → (relative path stored in the database, absolute path to write)."""


@dataclass(frozen=True)
class UnitResult:
    """A stored per-unit result: a JSON summary, the merged records file and provenance.

    Figures a stage draws when merging (PNG files under the submission's records folder, e.g.
    the weather attack's example panels) are listed in ``summary["files"]`` as name → path
    relative to the artifacts folder; the web serves exactly those names for finished
    submissions the viewer may see (``/models/{id}/files/{stage}/{name}``)."""

    unit: str
    summary: dict[str, Any]
    records_path: str
    count: int
    seconds: float
    protocol: dict[str, Any] = field(default_factory=dict)
    seeds: dict[str, Any] = field(default_factory=dict)
    data_hashes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StageOutcome:
    """``merge``'s result: per-unit results, the leaderboard metrics (None = not measured) and
    the sentence the finished submission's message carries."""

    results: Sequence[UnitResult]
    metrics: Mapping[str, float | None]
    message: str
    entry: Mapping[str, float | int] = field(default_factory=dict)
    """Figures of the leaderboard entry row itself (certification: test_sets, count, seconds)."""


@dataclass(frozen=True)
class Uncertainty:
    """A stage's figures with their 95 % intervals over the sampled images (metric key →
    (low, high), None where not measured) and the per-image terms of the figures that have a
    paired test (a ``certbench.stats.terms.terms_table``, None when there are none)."""

    intervals: Mapping[str, tuple[float | None, float | None]]
    terms: Any = None

    def bounds(self) -> dict[str, float | None]:
        """The stored bounds: ``<key>_ci_low`` and ``<key>_ci_high`` of every figure."""
        out: dict[str, float | None] = {}
        for key, (low, high) in self.intervals.items():
            out[key + CI_LOW], out[key + CI_HIGH] = low, high
        return out


class Stage:
    """Base class of an evaluation stage; see the module docstring for the contract."""

    name: ClassVar[str]
    """Registry key, ``stage`` column value and the key of the definition's ``stages`` block."""
    title: ClassVar[str]
    queue: ClassVar[str]
    """Celery queue its shards go to (a deployment routes stages to workers by queue)."""
    protocol_model: ClassVar[type[BaseModel] | None] = None
    """The definition block's schema; None for a stage every benchmark runs (certification)."""
    shard_size_setting: ClassVar[str] = "CERTBENCH_SHARD_SIZE"
    """The setting to name when a shard overruns its time limit."""
    default_batch_size: ClassVar[int] = 256
    batch_size_env: ClassVar[str | None] = None
    """Environment variable a worker reads its batch size from; default
    ``CERTBENCH_<NAME>_BATCH_SIZE``."""
    records_prefix: ClassVar[str | None] = None
    """Folder of its records under ``records/<submission>/``; default ``_<name>``."""

    # ---- definitions ----------------------------------------------------------------------------

    def protocol_row(self, block: BaseModel, definition: BenchmarkSchema) -> dict[str, Any]:
        """The stored protocol (JSON) of a definition's block; stages add derived fields here."""
        return block.model_dump(mode="json")

    def enabled(self, item: WorkItem) -> bool:
        """Whether this submission's benchmark runs the stage (default: it has the block)."""
        return self.name in item.stages

    # ---- work -----------------------------------------------------------------------------------

    def units(self, item: WorkItem, settings: Settings) -> list[Unit]:
        raise NotImplementedError

    def shard_size(self, settings: Settings) -> int:
        """Images per shard. Every worker must use the same value (the plan depends on it)."""
        return settings.shard_size

    def estimate(self, item: WorkItem, settings: Settings) -> StageEstimate:
        """Forward passes per unit under this submission's protocol, before anything runs.

        ``item`` may be a planning item (``models.stages.work.planning_item``: no submission yet, at
        intake or for a benchmark page), so only protocol fields may be read. The default, for a
        stage that declares no cost, counts one forward pass per image and says so; built-in
        stages override it with their protocol's count.
        """
        return self.per_image_estimate(
            item,
            settings,
            1,
            exact=False,
            basis="one forward pass per image",
            note=f"the {self.name} stage declares no cost: counted as one forward pass per image",
        )

    def per_image_estimate(
        self, item: WorkItem, settings: Settings, passes: int, *, exact: bool, basis: str,
        note: str = "",
    ) -> StageEstimate:  # fmt: skip
        """Every unit at ``passes`` forward passes per image, the count ``basis`` explains."""
        units = per_image(self.units(item, settings), passes)
        return StageEstimate(stage=self.name, units=units, exact=exact, basis=basis, note=note)

    def run(self, item: WorkItem, shard: ShardSpec, context: RunContext) -> ShardOutput:
        raise NotImplementedError

    def merge(
        self, item: WorkItem, shards: Shards, context: MergeContext, settings: Settings
    ) -> StageOutcome:
        raise NotImplementedError

    def failure_reason(self, error: BaseException) -> str | None:
        """The reason code a run fails with when ``run`` raises ``error`` (None: a crash, failed
        as ``worker_error`` with its traceback logged). Missing data is the operator's to fix."""
        from certbench.errors import DataSourceError
        from models.core.errors import DatasetMismatchError

        if isinstance(error, DatasetMismatchError):
            return "dataset_mismatch"
        return "dataset_unavailable" if isinstance(error, DataSourceError) else None

    # ---- uncertainty ----------------------------------------------------------------------------

    has_intervals: ClassVar[bool] = False
    """True when ``uncertainty`` gives intervals (the backfill then looks for stored bounds)."""

    def uncertainty(
        self, protocol: Mapping[str, Any] | None, records: Mapping[str, Path]
    ) -> Uncertainty | None:
        """95 % intervals of the stage's leaderboard figures and the per-image terms of their
        paired tests, from its merged records alone (unit → file; ``protocol`` is the stored
        block). The pipeline calls it after ``merge`` and stores the bounds beside the figures;
        ``certbench results backfill-intervals`` calls it for entries merged before. None: the
        stage has no intervals (the default)."""
        return None

    def paired_keys(self) -> frozenset[str]:
        """Metric keys whose per-image terms the stage stores: they have paired tests (the
        compare endpoint) and "tied with #k" marks when a leaderboard is sorted by them.
        Default: every figure of a stage with intervals, none otherwise."""
        if not self.has_intervals:
            return frozenset()
        return frozenset(spec.key for spec in self.all_metric_specs())

    # ---- presentation ---------------------------------------------------------------------------

    def all_metric_specs(self) -> list[MetricSpec]:
        """Every metric the stage can store (sort keys, REST fields)."""
        return []

    def metric_specs(
        self, protocol: Mapping[str, Any] | None, *, test_sets: int, bands: Sequence[str]
    ) -> list[MetricSpec]:
        """Every figure the stage stores for one benchmark: its leaderboard columns and its
        REST-only figures (``column=False``), each a ``metrics`` field and a sort key of that
        benchmark. ``protocol`` is the stage's stored block (None for a stage without one),
        ``test_sets`` and ``bands`` the benchmark's."""
        return self.all_metric_specs()

    def batch_size_variable(self) -> str:
        return self.batch_size_env or f"CERTBENCH_{self.name.upper()}_BATCH_SIZE"

    def folder(self, unit: str) -> str:
        """Records folder of a unit, relative to ``records/<submission>/``."""
        prefix = self.records_prefix or f"_{self.name}"
        return f"{prefix}/{unit}" if unit else prefix


def run_seed_metadata(item: WorkItem) -> dict[str, str]:
    """The run's seed as revealed with its results (merged records, stored result seeds):
    ``certbench certify ... --seed <seed>`` reproduces the records. Only ever written where it
    is served after the run has ended (``api.services.leaderboards`` checks the state). Stages
    put it in their merged records' metadata and in ``UnitResult.seeds``."""
    return {
        "seed": item.seed_text,
        "seed_kind": item.seed_kind,
        "seed_commitment": item.seed_commitment,
    }


def check_shard_seed(item: WorkItem, metadata: Mapping[str, Any], where: str) -> None:
    """Refuse to merge a shard computed under another run seed than the run's.

    All of a run's records must follow from its one seed, or the revealed seed would not
    reproduce them. Shard files name the seed's commitment (``seed_commitment``); a shard naming
    another one, or none on a secret-seed run (written before the stage drew its noise from the
    run seed, e.g. left from before an upgrade), holds other noise. A public-seed run (from
    before commit-reveal) accepts shards without a commitment: their noise came from the public
    seed as well. Raises StorageError naming ``where``.
    """
    from models.core.errors import StorageError

    found = metadata.get("seed_commitment")
    if found is None and item.seed_kind != "secret":
        return
    if found != item.seed_commitment:
        raise StorageError(
            f"{where} was computed under another run seed (commitment {str(found)[:12]}…, the "
            f"run's {item.seed_commitment[:12]}…); re-run the submission fresh"
        )


def recorded_data_hashes(
    found: Iterable[Mapping[str, Any] | None], *, where: str
) -> dict[str, str]:
    """The one ``data_hashes`` (``models.stages.inputs.data_hashes``) the shards of a unit or
    stage recorded: what its result says it was computed on.

    ``found`` holds each shard's recorded hashes (None for shards written before stages
    recorded them, skipped). Raises StorageError naming ``where`` when shards were computed on
    different bytes (the data changed during the run): their records must not be merged.
    """
    from models.core.errors import StorageError

    seen: list[dict[str, str]] = []
    for hashes in found:
        if hashes and dict(hashes) not in seen:
            seen.append(dict(hashes))
    if len(seen) > 1:
        raise StorageError(
            f"the shards of {where} were computed on different data "
            f"({[h.get('sha256') or h.get('revision') for h in seen]}); re-run the submission "
            "fresh"
        )
    return seen[0] if seen else {}
