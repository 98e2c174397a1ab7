"""Response shapes of benchmarks and the data sets they read (``/api/v1/benchmarks``,
``/api/v1/datasets``): protocol, test sets, where this server reads each one from and whether
this machine holds the data. Built from ORM rows by the ``of`` constructors; stored protocols are
served without this deployment's local folders (:func:`public_protocol`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from api.data_sources import DataSourcePublic
from api.schemas.progress import EstimatePublic
from models.boards.leaderboard import benchmark_sort_keys
from models.db.entities import Benchmark, TestSet

#: Keys of a stored robustness protocol that name this deployment's files, never served.
PRIVATE_PROTOCOL_KEYS = frozenset({"folder"})


def public_protocol(protocol: dict[str, Any] | None) -> dict[str, Any] | None:
    """A robustness protocol as served: without local folders (None stays None)."""
    if protocol is None:
        return None
    return {k: v for k, v in protocol.items() if k not in PRIVATE_PROTOCOL_KEYS}


class ProtocolPublic(BaseModel):
    version: str
    n0: int
    n: int
    alpha: float
    seed: int = Field(
        description=(
            "public seed for local, reproducible CLI runs; the service never uses it: every "
            "run draws its own secret seed (see a submission's `seed`)"
        )
    )


class TestSetPublic(BaseModel):
    __test__ = False

    name: str
    dataset_repo: str
    hub_url: str | None = Field(
        description="the Hub page of the data read, when this server reads it from the Hub "
        "(``source.kind`` hub); null for a local folder or data generated here"
    )
    config: str | None
    revision: str | None
    split: str
    subset_skip: int
    subset_limit: int | None
    num_images: int
    band: str | None
    attributes: dict[str, Any]
    provenance: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "what the definition pins about the data: generator, generator_version, protocol "
            "(CIFAR-F: paper or reference), generation_seed, source, source_revision, and the "
            "content hash workers check (sha256 of the config's parquet shard) or hub_commit"
        ),
    )
    source: DataSourcePublic = Field(
        description="where this server reads the images from: the Hub repo at a revision, or a "
        "local folder named by its content hash (``dataset_repo`` is the published name either "
        "way)"
    )

    @classmethod
    def of(cls, test_set: TestSet) -> TestSetPublic:
        source = DataSourcePublic.of(
            repo=test_set.dataset_repo,
            folder=test_set.dataset_folder,
            revision=test_set.revision,
            provenance=test_set.provenance or {},
            name=test_set.name,
        )
        return cls(
            name=test_set.name,
            dataset_repo=test_set.dataset_repo,
            hub_url=source.hub_url,
            config=test_set.config,
            revision=test_set.revision,
            split=test_set.split,
            subset_skip=test_set.subset_skip,
            subset_limit=test_set.subset_limit,
            num_images=test_set.num_images,
            band=test_set.band,
            attributes=dict(test_set.attributes),
            provenance=dict(test_set.provenance or {}),
            source=source,
        )


class DataAvailabilityFields(BaseModel):
    """Whether this machine holds a benchmark's data, shared by its full and summary shapes."""

    data_available: bool | None = Field(
        default=None,
        description="whether this machine holds the benchmark's data (its local folders, local "
        "copies of its Hub datasets or the `datasets` cache); submissions to a benchmark without "
        "it are refused (422 dataset_unavailable). Null where the service does not check "
        "(CERTBENCH_REQUIRE_LOCAL_DATA=false)",
    )
    data_hint: str | None = Field(
        default=None,
        description="when data_available is false: what is missing and the command that fixes "
        "it, e.g. `certbench datasets fetch cifar10`",
        examples=[
            "uoft-cs/cifar10 not on this machine: run `certbench datasets fetch cifar10` where "
            "the service runs, or point the definition's `folder` at a local copy"
        ],
    )
    data_command: str | None = Field(
        default=None,
        description="when Hub data is missing: the one command that fetches it",
        examples=["certbench datasets fetch cifar10"],
    )


class BenchmarkFields(DataAvailabilityFields):
    """What a benchmark is, the same in its full answer and in the list's summary."""

    name: str
    title: str
    description: str
    base_dataset: str
    num_classes: int
    sigmas: list[float]
    definition_version: int
    protocol: ProtocolPublic
    bands: dict[str, list[str]]


class BenchmarkPublic(BenchmarkFields):
    test_sets: list[TestSetPublic]
    entries: int = Field(description="finished public entries on the leaderboard")
    robustness: dict[str, Any] | None = Field(
        default=None,
        description=(
            "protocol of the base-classifier robustness stage (Muthukumar et al. 2025: clean, "
            "ℓ∞ and ℓ∞ ∩ PD "
            "robust accuracy of the deterministic model, not smoothed): dataset repo/config/"
            "split, image subset (subset_skip, subset_limit, num_images), anchor bank file, k, "
            "anchor_seed, eps (list, units of 1/255), n_iter, n_target_classes, projection, "
            "weighting; null for a benchmark without the stage"
        ),
        examples=[
            {
                "repo": "uoft-cs/cifar10",
                "anchors": "cifar10_k50_s0.safetensors",
                "k": 50,
                "eps": [8, 16],
                "n_iter": 100,
                "projection": "exact",
                "weighting": "pd",
                "num_images": 500,
            }
        ],
    )
    stages: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description=(
            "protocol of every evaluation stage the benchmark runs beyond certification, by stage "
            "name (``robustness`` repeats the pd_robustness one)"
        ),
    )
    sort_keys: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "the leaderboard's sort keys → the column label the web page shows: every figure "
            "of the rows' `metrics` this benchmark stores (same names), then sigma, submitted, "
            "finished and model_name"
        ),
        examples=[{"macr": "mACR", "cert_acc_050": "r = 0.5", "sigma": "σ"}],
    )
    estimate: EstimatePublic | None = Field(
        default=None,
        description="the work of one submission, the same at every σ (no stage's cost depends "
        "on σ), estimated before an entry's preprocessing is known (a Fourier-lens pixel path "
        "counts 1 image here: see the stage's note); seconds at this fleet's measured "
        "throughput. Only in ``GET /benchmarks/{name}``",
    )

    @classmethod
    def of(cls, benchmark: Benchmark, *, entries: int) -> BenchmarkPublic:
        return cls(
            name=benchmark.name,
            title=benchmark.title,
            description=benchmark.description,
            base_dataset=benchmark.base_dataset,
            num_classes=benchmark.num_classes,
            sigmas=list(benchmark.sigmas),
            definition_version=benchmark.definition_version,
            protocol=ProtocolPublic(
                version=benchmark.protocol_version,
                n0=benchmark.n0,
                n=benchmark.n,
                alpha=benchmark.alpha,
                seed=benchmark.seed,
            ),
            bands={k: list(v) for k, v in benchmark.bands.items()},
            test_sets=[TestSetPublic.of(ts) for ts in benchmark.test_sets],
            entries=entries,
            robustness=public_protocol((benchmark.stages or {}).get("pd_robustness")),
            stages={
                name: public_protocol(row) or {} for name, row in (benchmark.stages or {}).items()
            },
            sort_keys=benchmark_sort_keys(benchmark),
        )


class TestSetBrief(BaseModel):
    """A test set as the benchmark list shows it (``GET /benchmarks/{name}`` has every field)."""

    __test__ = False

    name: str
    config: str | None
    band: str | None
    hub_url: str | None = Field(
        description="as ``TestSetPublic.hub_url``: null unless read from the Hub"
    )
    source: str = Field(description="where this server reads it from (``source.label``)")


class BenchmarkSummary(BenchmarkFields):
    """A benchmark as ``GET /api/v1/benchmarks`` lists it: what to submit to, without each test
    set's details (``GET /api/v1/benchmarks/{name}`` has them)."""

    entries: int = Field(description="finished public entries on the leaderboard")
    robustness: dict[str, Any] | None = Field(
        default=None,
        description="protocol of the base-classifier robustness stage (Muthukumar et al. 2025)",
    )
    test_set_count: int
    test_sets: list[TestSetBrief]

    @classmethod
    def of(cls, public: BenchmarkPublic) -> BenchmarkSummary:
        return cls(
            **public.model_dump(exclude={"test_sets"}),
            test_set_count=len(public.test_sets),
            test_sets=[
                TestSetBrief(
                    name=t.name,
                    config=t.config,
                    band=t.band,
                    hub_url=t.hub_url,
                    source=t.source.label,
                )
                for t in public.test_sets
            ],
        )


class DatasetPublic(BaseModel):
    """A data set the benchmarks use, its configs, and where this server reads them from (the
    Hub, a local folder, or generated here)."""

    repo: str = Field(description="the name the benchmark definitions give the data set")
    hub_url: str | None = Field(
        description="its Hugging Face Hub page when this server reads it from the Hub; null when "
        "every test set of it is a local folder or data generated here (nothing to link to)"
    )
    benchmarks: list[str]
    configs: list[str]
    load_example: str | None = Field(
        description="a ``datasets.load_dataset`` call for the Hub copy; null where ``hub_url`` is"
    )
    sources: list[DataSourcePublic] = Field(
        description="the distinct sources this server reads the repo's test sets from (a local "
        "folder, or the Hub at a revision), in the benchmarks' order"
    )
