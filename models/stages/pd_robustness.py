"""PD robustness stage: the base classifier under ℓ∞ and ℓ∞ ∩ PD attacks (seed 004 §6).

Seed 004's protocol on the submission's base classifier (no smoothing), on the benchmark's clean
subset: ℓ∞ APGD-CE + APGD-T, each example then projected into the ℓ∞ ∩ PD ball, and PD-aware
APGD; robust accuracy is the worse of the two. Every image's attacks are seeded from
(the run's secret seed, "pd", image index), so any split into shards gives the records of one run.

The anchor bank is read from ``Settings.anchors_dir``; when the file is absent the first shard
builds it from the training split (greedy k-centre, seeded) and writes it atomically, so every
worker and every later submission attack with the same anchors. Each shard records the bank's
SHA-256, and merging refuses shards attacked with different banks.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, Field, model_validator

from models.benchmarks.definitions import MAX_CLASSES, BenchmarkSchema, ImageSource, Seed
from models.benchmarks.sources import TestSetSpec, image_source_spec
from models.core.errors import StorageError
from models.core.settings import Settings
from models.db.entities import StageResult
from models.stages.base import (
    MergeContext,
    MetricSpec,
    RecordedShard,
    RunContext,
    ShardOutput,
    ShardSpec,
    Stage,
    StageEstimate,
    StageOutcome,
    Uncertainty,
    Unit,
    UnitResult,
    check_shard_seed,
    per_image,
    recorded_data_hashes,
    run_seed_metadata,
)
from models.stages.registry import register
from models.stages.work import WorkItem

if TYPE_CHECKING:
    from certbench.pd import AnchorBank, RobustnessReport

#: ε (units of 1/255) with leaderboard columns.
EPS_COLUMNS = (8, 16)
#: The clean subset is the stage's one unit.
UNIT = ""
BASE = "base classifier (deterministic model, not smoothed)"


#: Bounds: anchors per class (the bank is k × classes images in memory) and attack iterations.
MAX_ANCHORS = 10_000
MAX_ITERATIONS = 100_000


class RobustnessProtocol(ImageSource):
    """Definition block ``stages.pd_robustness`` (also accepted as top-level ``robustness``).

    Attacks the benchmark's clean test subset (``repo``/``folder``, every ``skip``-th image) at
    each ε in ``eps`` (units of 1/255; the leaderboard has columns for 8 and 16). The anchor bank
    (k per class, greedy farthest-first with ``anchor_seed``) comes from ``anchors`` under the
    service's anchors folder, built from the training split ``anchors_split`` of the same source
    on first use when the file is absent. ``weighting`` ``pdw`` is PD-W (CIFAR-100 superclasses).
    """

    anchors: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}\.safetensors$")]
    anchors_split: str = "train"
    k: int = Field(default=50, gt=0, le=MAX_ANCHORS)
    anchor_seed: Seed = 0
    eps: list[Literal[8, 16]] = Field(default_factory=lambda: [8, 16], min_length=1)
    n_iter: int = Field(default=100, gt=0, le=MAX_ITERATIONS)
    n_target_classes: int = Field(default=9, ge=0, le=MAX_CLASSES)
    projection: Literal["exact", "lazy"] = "exact"
    weighting: Literal["pd", "pdw"] = "pd"

    @model_validator(mode="after")
    def _distinct_eps(self) -> RobustnessProtocol:
        if len(set(self.eps)) != len(self.eps):
            raise ValueError(f"robustness.eps repeats a radius: {self.eps}")
        return self


@dataclass(frozen=True)
class RobustnessSpec:
    """The stored protocol resolved against this deployment's folders: ``images`` is the
    attacked clean subset, ``anchors_path`` the bank file (built from the same source's
    ``anchors_split`` when absent); ``protocol`` the stored row it came from."""

    images: TestSetSpec
    anchors_path: Path
    anchors_split: str
    k: int
    anchor_seed: int
    eps: tuple[int, ...]
    n_iter: int
    n_target_classes: int
    projection: str
    weighting: str
    protocol: dict[str, Any]

    def describe(self) -> dict[str, Any]:
        """The settings stored with the result: the benchmark's protocol without local paths."""
        return {key: value for key, value in self.protocol.items() if key != "folder"}


def robustness_spec(protocol: Mapping[str, Any], settings: Settings) -> RobustnessSpec:
    """Resolve a benchmark's stored robustness protocol against this deployment's folders."""
    assert settings.anchors_dir is not None  # filled by Settings' validator
    return RobustnessSpec(
        images=image_source_spec(protocol, name="_robustness", settings=settings),
        anchors_path=settings.anchors_dir / protocol["anchors"],
        anchors_split=protocol["anchors_split"],
        k=protocol["k"],
        anchor_seed=protocol["anchor_seed"],
        eps=tuple(protocol["eps"]),
        n_iter=protocol["n_iter"],
        n_target_classes=protocol["n_target_classes"],
        projection=protocol["projection"],
        weighting=protocol["weighting"],
        protocol=dict(protocol),
    )


@register
class PDRobustness(Stage):
    name = "pd_robustness"
    title = "Robustness of the base classifier (ℓ∞, ℓ∞ ∩ PD)"
    queue = "certbench.robustness"
    protocol_model = RobustnessProtocol
    shard_size_setting = "CERTBENCH_ROBUSTNESS_SHARD_SIZE"
    default_batch_size = 256
    batch_size_env = "CERTBENCH_ROBUSTNESS_BATCH_SIZE"
    records_prefix = "_robustness"

    def protocol_row(self, block: BaseModel, definition: BenchmarkSchema) -> dict[str, Any]:
        """The definition's fields plus the derived image subset."""
        assert isinstance(block, RobustnessProtocol)
        skip, limit, count = block.subset(definition.protocol)
        row = block.model_dump(mode="json")
        row.update(subset_skip=skip, subset_limit=limit, num_images=count)
        return row

    def units(self, item: WorkItem, settings: Settings) -> list[Unit]:
        return [Unit(UNIT, item.stages[self.name]["num_images"])]

    def estimate(self, item: WorkItem, settings: Settings) -> StageEstimate:
        """An upper bound: one clean forward pass per image, then for every ε and every attack
        plan (APGD-CE, plus APGD-T on min(n_target_classes, classes − 1) targets when there are
        at least 4 classes) ℓ∞ APGD and PD-aware APGD of n_iter + 1 forward passes each and one
        pass checking the projected example (``certbench.pd.evaluation._attack_batch``).
        Images the model already misclassifies are not attacked, so the real count is lower."""
        row = item.stages[self.name]
        targets = min(row["n_target_classes"], item.num_classes - 1)
        plans = 1 + (targets if item.num_classes >= 4 else 0)
        per_attack = 2 * (row["n_iter"] + 1) + 1
        passes = 1 + len(row["eps"]) * plans * per_attack
        return StageEstimate(
            stage=self.name,
            units=per_image(self.units(item, settings), passes),
            exact=False,
            basis=f"{row['num_images']:,} images × (1 clean + {len(row['eps'])} ε × {plans} "
            f"attack plan(s) × (2 × (n_iter {row['n_iter']} + 1) + 1)) forward passes",
            note="an upper bound: misclassified images are not attacked; backward passes of "
            "the attacks are not counted",
        )

    def failure_reason(self, error: BaseException) -> str | None:
        """A missing or contradicting anchor bank is ``anchors_unavailable``."""
        from certbench.errors import ThreatModelError

        if isinstance(error, ThreatModelError):
            return "anchors_unavailable"
        return super().failure_reason(error)

    def shard_size(self, settings: Settings) -> int:
        """Attacks cost far more per image than certification on a CPU: own size if set."""
        return settings.robustness_shard_size or settings.shard_size

    def run(self, item: WorkItem, shard: ShardSpec, context: RunContext) -> ShardOutput:
        """Attack the shard's images and write the per-image report."""
        from certbench.pd import robust_accuracy, weighted_threat
        from certbench.smoothing import derive_seed
        from models.stages.inputs import data_hashes, images_for, model_for

        spec = robustness_spec(item.stages[self.name], context.settings)
        hashes = data_hashes(spec.images)  # raises DatasetMismatchError before any work
        images = images_for(spec.images)
        bank, bank_digest = anchor_bank(spec, num_classes=item.num_classes)
        window = slice(shard.start, shard.stop)
        report = robust_accuracy(
            model_for(item, context.device),
            images.images[window],
            images.labels[window],
            anchors=weighted_threat(bank, spec.weighting, device=context.device),
            eps_list=[eps / 255 for eps in spec.eps],
            n_iter=spec.n_iter,
            n_target_classes=spec.n_target_classes,
            seed=derive_seed(item.seed, "pd"),
            batch_size=context.batch_size,
            device=context.device,
            indices=images.indices[window],
            pd_projection="exact" if spec.projection == "exact" else "lazy",
            on_batch=context.on_progress,
        )
        metadata = {
            "submission_id": str(item.submission_id),
            "benchmark": item.benchmark,
            "shard_index": str(shard.shard_index),
            "start": str(shard.start),
            "stop": str(shard.stop),
            "seed_commitment": item.seed_commitment,  # the seed is secret until the run ends
            "anchors_sha256": bank_digest,
            "data_hashes": json.dumps(hashes, sort_keys=True),
        }
        report.write(context.target, metadata=metadata)
        return ShardOutput(
            count=len({r.index for r in report.records}),
            metadata=metadata,
            noun="image(s) attacked",
        )

    def merge(
        self,
        item: WorkItem,
        shards: Mapping[str, Sequence[RecordedShard]],
        context: MergeContext,
        settings: Settings,
    ) -> StageOutcome:
        """Merge the shards' reports (one anchor bank, one run seed), store every figure."""
        from certbench.pd import RobustnessReport

        spec = robustness_spec(item.stages[self.name], settings)
        recorded = sorted(shards[UNIT], key=lambda s: s.start)
        metadata = [shard_metadata(s.path) for s in recorded]
        for shard, found in zip(recorded, metadata, strict=True):
            check_shard_seed(item, found, f"robustness shard {str(shard.path)!r}")
        banks = {found.get("anchors_sha256") for found in metadata}
        if len(banks) != 1:
            raise StorageError(
                f"the robustness shards of submission {item.submission_id} were attacked with "
                f"different anchor banks ({sorted(map(str, banks))}); re-run the submission fresh"
            )
        report = RobustnessReport.merge([_read(s.path) for s in recorded])
        relpath, target = context.target_for(UNIT)
        report.write(
            target,
            metadata={
                "submission_id": str(item.submission_id),
                "benchmark": item.benchmark,
                "evaluator_version": context.evaluator_version,
                **run_seed_metadata(item),
            },
        )
        figures = report.summary()
        result = UnitResult(
            unit=UNIT,
            summary={"base_accuracy": figures["clean_accuracy"], "figures": figures},
            records_path=relpath,
            count=int(figures["count"]),
            seconds=float(sum(s.seconds for s in recorded)),
            protocol={**spec.describe(), "anchors_sha256": banks.pop()},
            seeds={
                **run_seed_metadata(item),
                "attack_seed_tag": "pd",
                "anchor_seed": spec.anchor_seed,
            },
            data_hashes=recorded_data_hashes(
                [json.loads(m["data_hashes"]) if "data_hashes" in m else None for m in metadata],
                where=f"the robustness stage of submission {item.submission_id}",
            ),
        )
        return StageOutcome(
            results=[result],
            metrics={"base_accuracy": figures["clean_accuracy"], **leaderboard_columns(figures)},
            message=f"attacked {result.count} clean image(s) (ℓ∞, ℓ∞ ∩ PD)",
        )

    has_intervals = True

    def uncertainty(
        self, protocol: Mapping[str, Any] | None, records: Mapping[str, Path]
    ) -> Uncertainty:
        """Clopper-Pearson intervals of the accuracies over the clean subset's images; their
        per-image 0/1 terms for exact McNemar tests (``models.stages.stage_intervals``)."""
        from models.stages.stage_intervals import robustness_uncertainty

        return robustness_uncertainty(records)

    def all_metric_specs(self) -> list[MetricSpec]:
        return self.metric_specs({"eps": list(EPS_COLUMNS)}, test_sets=1, bands=())

    def metric_specs(
        self, protocol: Mapping[str, Any] | None, *, test_sets: int, bands: Sequence[str]
    ) -> list[MetricSpec]:
        """The base classifier's clean accuracy and its ℓ∞ and ℓ∞ ∩ PD robust accuracy at each
        ε the benchmark attacks; none for a benchmark without the stage."""
        if protocol is None:
            return []
        specs = [
            MetricSpec(
                "base_accuracy",
                "clean (base)",
                f"clean accuracy of the {BASE} on the clean subset",
                group="robustness",
            )
        ]
        for eps in EPS_COLUMNS:
            if eps not in protocol.get("eps", EPS_COLUMNS):
                continue
            specs += [
                MetricSpec(
                    f"linf_acc_{eps}",
                    f"ℓ∞ {eps}/255",
                    f"robust accuracy of the {BASE} under ℓ∞ APGD at ε = {eps}/255",
                    group="robustness",
                ),
                MetricSpec(
                    f"pd_acc_{eps}",
                    f"ℓ∞∩PD {eps}/255",
                    f"robust accuracy of the {BASE} under ℓ∞ ∩ PD at ε = {eps}/255: the worse of "
                    "ℓ∞ APGD + lazy PD projection and PD-aware APGD (Muthukumar et al. 2025)",
                    group="robustness",
                ),
            ]
        return specs


def leaderboard_columns(figures: Mapping[str, float]) -> dict[str, float | None]:
    """The ε columns of the leaderboard (None where the protocol did not attack at that ε)."""
    out: dict[str, float | None] = {}
    for eps in EPS_COLUMNS:
        out[f"linf_acc_{eps}"] = figures.get(f"linf_robust_accuracy_{eps}")
        out[f"pd_acc_{eps}"] = figures.get(f"pd_robust_accuracy_{eps}")
    return out


def anchor_bank(spec: RobustnessSpec, *, num_classes: int) -> tuple[AnchorBank, str]:
    """The protocol's bank (first ``k`` anchors per class), built and saved when absent, and the
    SHA-256 of the file version it was read from.

    Raises ThreatModelError when the stored bank contradicts the protocol (another seed, fewer
    anchors, other classes): silently attacking with other anchors would change the threat.
    """
    from certbench.errors import ThreatModelError

    path = spec.anchors_path
    if not path.is_file():
        build_anchor_bank(spec)
    stat = os.stat(path)
    bank, digest = _load_bank(str(path), stat.st_mtime_ns, stat.st_size)
    problems = []
    if bank.seed != spec.anchor_seed:
        problems.append(f"seed {bank.seed} (protocol: {spec.anchor_seed})")
    if bank.k < spec.k:
        problems.append(f"k = {bank.k} per class (protocol: {spec.k})")
    if bank.num_classes != num_classes:
        problems.append(f"{bank.num_classes} classes (benchmark: {num_classes})")
    if problems:
        raise ThreatModelError(
            f"anchor bank {str(path)!r} does not match the benchmark's robustness protocol: "
            f"{'; '.join(problems)}. Delete it to let the worker rebuild it, or build it with "
            f"`certbench anchors build SOURCE --k {spec.k} --seed {spec.anchor_seed} --out {path}`"
        )
    return (bank.truncated(spec.k) if bank.k > spec.k else bank), digest


def build_anchor_bank(spec: RobustnessSpec) -> Path:
    """Select the anchors from the training split and write the bank atomically."""
    from certbench.data import load_images
    from certbench.pd import bank_from_image_set
    from models.stages.inputs import operator_advice

    with operator_advice(spec.images):
        train = load_images(
            spec.images.source,
            config=spec.images.config,
            split=spec.anchors_split,
            revision=spec.images.revision,
        )
    bank = bank_from_image_set(
        train,
        dataset=spec.protocol["repo"],
        k=spec.k,
        seed=spec.anchor_seed,
        revision=spec.images.revision,
        split=spec.anchors_split,
    )
    return bank.save(spec.anchors_path)


@lru_cache(maxsize=2)
def _load_bank(path: str, mtime_ns: int, size: int) -> tuple[AnchorBank, str]:
    """Read and hash one file version, once per worker process."""
    from certbench.pd import AnchorBank

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return AnchorBank.load(path), digest.hexdigest()


def shard_metadata(path: Path) -> dict[str, str]:
    """The key/value metadata a worker wrote into a robustness shard's parquet schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        raw = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowInvalid) as err:
        raise StorageError(f"robustness shard {str(path)!r} is unreadable: {err}") from err
    return {k.decode(): v.decode() for k, v in raw.items()}


def _read(path: Path) -> RobustnessReport:
    from certbench.errors import ThreatModelError
    from certbench.pd import RobustnessReport

    try:
        return RobustnessReport.read(path)
    except ThreatModelError as err:
        raise StorageError(f"robustness shard {str(path)!r}: {err}") from err


@dataclass(frozen=True)
class RobustnessResult:
    """A stored PD-robustness result read as typed fields: ``base_accuracy`` is the deterministic
    classifier's clean accuracy; ``linf_acc_*``/``pd_acc_*`` the ℓ∞ and ℓ∞ ∩ PD robust accuracies
    at ε = 8/255 and 16/255 (None when not attacked at that ε); ``figures`` every figure of the
    report; ``protocol`` the attack settings with the anchor bank's SHA-256."""

    submission_id: int
    base_accuracy: float
    linf_acc_8: float | None
    linf_acc_16: float | None
    pd_acc_8: float | None
    pd_acc_16: float | None
    figures: dict[str, Any]
    protocol: dict[str, Any]
    count: int
    seconds: float
    evaluator_version: str
    records_path: str

    @classmethod
    def of(cls, row: StageResult) -> RobustnessResult:
        figures = dict(row.summary["figures"])
        return cls(
            submission_id=row.submission_id,
            base_accuracy=row.summary["base_accuracy"],
            figures=figures,
            protocol=dict(row.protocol),
            count=row.count,
            seconds=row.seconds,
            evaluator_version=row.evaluator_version,
            records_path=row.records_path,
            **leaderboard_columns(figures),
        )
