"""The schema of a benchmark definition file: protocol, image sources, test sets, stage blocks.

Kept below the stage registry: the stages (``models.stages``) read a benchmark through
:class:`BenchmarkSchema`, and ``models.catalog.benchmarks.BenchmarkDefinition`` adds the validation
of each stage block by its registered stage, so that no stage module imports the catalog that
imports the registry that imports the stages.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from models.benchmarks.data_pins import DataPin, merged_pin, pinned_revision
from models.benchmarks.folders import check_folder

Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")]
Band = Literal["low", "mid", "high"]

# Bounds of every number a definition holds: what the pipeline can run (and its database
# columns store), so that an admin's typo is a 422 naming the limit, not a 500 (an Integer column
# overflowing at 2³¹) or a worker that allocates for 10⁹ source images (issue 27 §4). Generous:
# ten times the largest packaged benchmark where a protocol parameter is concerned.
#: Monte Carlo samples per image (Cohen et al. use n = 100,000; each costs a forward pass).
MAX_SAMPLES = 10_000_000
#: Images of a source split (CIFAR-10-C's largest configs hold 50,000; the worker indexes and
#: validates the whole split).
MAX_SOURCE_SIZE = 1_000_000
#: Seeds: 32-bit, as NumPy's and torch's generators are seeded everywhere in the pipeline.
MAX_SEED = 2**32 - 1
#: Integer columns (definition versions, class counts) hold 32-bit signed values.
MAX_INT32 = 2**31 - 1
#: Class counts (the manifest's bound, certbench.nets.manifest).
MAX_CLASSES = 100_000
#: Noise levels σ on inputs in [0, 1] (σ = 10 is noise alone already).
MAX_SIGMA = 10.0
#: Test sets of one benchmark (CIFAR-10-F has 192) and σ values.
MAX_TEST_SETS = 2_000
MAX_SIGMAS = 64

#: Caps on a submitted network (``CostLimits``): what the bounds of a cap may be. 10¹³ parameters
#: and 10¹⁶ FLOPs per sample are beyond any network certified today (ViT-22B: 2.2·10¹⁰).
MAX_PARAMETERS_CAP = 10**13
MAX_FLOPS_CAP = 10**16

DataFolder = Annotated[str, AfterValidator(check_folder)]
"""A local data folder: plain path segments, never ``..`` (``models.benchmarks.folders``)."""

Samples = Annotated[int, Field(gt=0, le=MAX_SAMPLES)]
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]
SourceCount = Annotated[int, Field(gt=0, le=MAX_SOURCE_SIZE)]


class Protocol(BaseModel):
    """Certification protocol (Cohen et al. CERTIFY) and the image subset of every test set."""

    model_config = ConfigDict(extra="forbid")

    version: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")]
    n0: Samples = 100
    n: Samples = 100_000
    alpha: float = Field(default=0.001, gt=0, lt=0.5)
    seed: Seed = 0
    skip: SourceCount = 20
    limit: SourceCount | None = None


class CostLimits(BaseModel):
    """Caps on a submitted network, checked at intake on the network built on the ``meta``
    device (``certbench.nets.cost``): its parameters, and its FLOPs per noise sample (one forward
    pass on one input; certifying an image costs n0 + n of them).

    The defaults admit every network of the CIFAR leaderboards (WRN-70-16: 2.7·10⁸ parameters)
    and ImageNet-sized ViTs at 32 px, and refuse what no worker could certify in a day; a
    benchmark certified on CPUs (the demo) sets tighter ones.
    """

    model_config = ConfigDict(extra="forbid")

    max_parameters: int = Field(default=1_000_000_000, gt=0, le=MAX_PARAMETERS_CAP)
    max_flops_per_sample: int = Field(default=200_000_000_000, gt=0, le=MAX_FLOPS_CAP)


class ImageSource(BaseModel):
    """Where a set of images comes from and which of them count: every ``skip``-th of
    ``source_size`` (the protocol's skip by default), then the first ``limit``. ``folder`` (a
    local Hub-layout folder) wins over ``repo`` when set. ``provenance`` pins the bytes
    (``models.benchmarks.data_pins``): a test set's adds to the definition's defaults; a stage
    block's (the images a stage reads) stands alone."""

    model_config = ConfigDict(extra="forbid")

    repo: str = Field(min_length=1, max_length=128)
    folder: DataFolder | None = None
    config: str | None = None
    revision: str | None = None
    split: str = "test"
    source_size: SourceCount = 10_000
    skip: SourceCount | None = None
    limit: SourceCount | None = None
    provenance: DataPin | None = Field(
        default=None,
        description="how these images were made and their content hash / Hub commit "
        "(see models.benchmarks.data_pins)",
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


class BenchmarkSchema(BaseModel):
    """The fields of a benchmark definition file (``format: certbench-benchmark/1``), validated
    without the stage registry: what a stage reads of its benchmark. Stage blocks are checked
    against their registered stage by ``models.catalog.benchmarks.BenchmarkDefinition``."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["certbench-benchmark/1"]
    name: Name
    version: int = Field(ge=1, le=MAX_INT32)
    title: str = Field(min_length=1, max_length=128)
    description: str = ""
    base_dataset: str = Field(min_length=1, max_length=64)
    num_classes: int = Field(gt=1, le=MAX_CLASSES)
    sigmas: list[Annotated[float, Field(gt=0, le=MAX_SIGMA)]] = Field(
        min_length=1, max_length=MAX_SIGMAS
    )
    protocol: Protocol
    bands: dict[Band, list[str]] = Field(default_factory=dict)
    test_sets: list[TestSetDefinition] = Field(min_length=1, max_length=MAX_TEST_SETS)
    stages: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="evaluation stages beyond certification: stage name → its protocol block",
    )
    provenance: DataPin | None = Field(
        default=None,
        description="provenance shared by every test set (generator, protocol, seed, source); "
        "each test set's own `provenance` adds to it (its content hash)",
    )
    limits: CostLimits = Field(
        default_factory=CostLimits,
        description="caps on a submitted network's parameters and FLOPs per noise sample "
        "(refused at intake above them); the defaults when left out",
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
    def _consistent_pins(self) -> BenchmarkSchema:
        """A pinned Hub commit and an explicit revision must agree."""
        for test_set in self.test_sets:
            pinned_revision(
                test_set.revision,
                merged_pin(self.provenance, test_set.provenance),
                name=test_set.name,
            )
        return self

    @model_validator(mode="after")
    def _unique_names(self) -> BenchmarkSchema:
        names = [t.name for t in self.test_sets]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"test set names must be unique; repeated: {duplicates}")
        return self


def definition_folders(definition: BenchmarkSchema) -> list[tuple[str, str]]:
    """Every ``folder`` a definition names, as ``(field, folder)``: the test sets' and the stage
    blocks' (``models.benchmarks.folders.network_folder_problems`` checks them)."""
    found = [
        (f"test_sets[{i}].folder", test_set.folder)
        for i, test_set in enumerate(definition.test_sets)
        if test_set.folder is not None
    ]
    for name, block in definition.stages.items():
        folder = block.get("folder") if isinstance(block, dict) else None
        if folder is not None:
            found.append((f"stages.{name}.folder", str(folder)))
    return found
