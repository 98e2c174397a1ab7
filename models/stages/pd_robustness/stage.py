"""PD robustness stage: the base classifier under ℓ∞ and ℓ∞ ∩ PD attacks (Muthukumar et al.
2025, arXiv:2501.18098, §6).

The paper's protocol on the submission's base classifier (no smoothing), on the benchmark's clean
subset: ℓ∞ APGD-CE + APGD-T, each example then projected into the ℓ∞ ∩ PD ball, and PD-aware
APGD; robust accuracy is the worse of the two. Every image's attacks are seeded from
(the run's secret seed, "pd", image index), so any split into shards gives the records of one run.
The definition block, its resolved form and the anchor bank are
``models.stages.pd_robustness.protocol``; shard and merged files carry flat key/value metadata
(``RobustnessReport.write``), with the data hashes as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel

from models.core.errors import StorageError
from models.db.entities import StageResult
from models.stages.base import MetricSpec, ShardOutput, Stage, StageOutcome, Uncertainty, Unit
from models.stages.pd_robustness.protocol import RobustnessProtocol, anchor_bank, robustness_spec
from models.stages.registry import register
from models.stages.shard_files import read_shards, shard_metadata

if TYPE_CHECKING:
    from certbench.pd import RobustnessReport
    from models.benchmarks.definitions import BenchmarkSchema
    from models.core.settings import Settings
    from models.stages.base import MergeContext, RunContext, Shards, ShardSpec, StageEstimate
    from models.stages.work import WorkItem

#: ε (units of 1/255) with leaderboard columns.
EPS_COLUMNS = (8, 16)
#: The clean subset is the stage's one unit.
UNIT = ""
BASE = "base classifier (deterministic model, not smoothed)"


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
        return self.per_image_estimate(
            item,
            settings,
            passes,
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
        placed = {"shard_index": shard.shard_index, "start": shard.start, "stop": shard.stop}
        common = shard_metadata(item, hashes, **placed)
        data = common.pop("data_hashes")  # last, after the bank, as robustness files have it
        metadata = flat({**common, "anchors_sha256": bank_digest, "data_hashes": data})
        report.write(context.target, metadata=metadata)
        return ShardOutput(
            count=len({r.index for r in report.records}),
            metadata=metadata,
            noun="image(s) attacked",
        )

    def merge(
        self, item: WorkItem, shards: Shards, context: MergeContext, settings: Settings
    ) -> StageOutcome:
        """Merge the shards' reports (one anchor bank, one run seed), store every figure."""
        from certbench.errors import ThreatModelError
        from certbench.pd import RobustnessReport

        spec = robustness_spec(item.stages[self.name], settings)
        found = read_shards(item, shards, _read_shard, label="robustness", wrap=(ThreatModelError,))
        banks = {metadata.get("anchors_sha256") for metadata in found.metadata}
        if len(banks) != 1:
            raise StorageError(
                f"the robustness shards of submission {item.submission_id} were attacked with "
                f"different anchor banks ({sorted(map(str, banks))}); re-run the submission fresh"
            )
        report = RobustnessReport.merge(found.parts)
        relpath, target = context.target_for(UNIT)
        metadata = found.merged_metadata(context, benchmark=item.benchmark)
        report.write(target, metadata=flat(metadata))
        figures = report.summary()
        result = found.result(
            UNIT,
            summary={"base_accuracy": figures["clean_accuracy"], "figures": figures},
            records_path=relpath,
            count=int(cast(float, figures["count"])),
            protocol={**spec.describe(), "anchors_sha256": banks.pop()},
            seeds={"attack_seed_tag": "pd", "anchor_seed": spec.anchor_seed},
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
        per-image 0/1 terms for exact McNemar tests (``models.stages.intervals``)."""
        from models.stages.intervals import robustness_uncertainty

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


def leaderboard_columns(figures: Mapping[str, float | None]) -> dict[str, float | None]:
    """The ε columns of the leaderboard (None where the protocol did not attack at that ε)."""
    out: dict[str, float | None] = {}
    for eps in EPS_COLUMNS:
        out[f"linf_acc_{eps}"] = figures.get(f"linf_robust_accuracy_{eps}")
        out[f"pd_acc_{eps}"] = figures.get(f"pd_robust_accuracy_{eps}")
    return out


def flat(metadata: Mapping[str, Any]) -> dict[str, str]:
    """Metadata as a robustness file carries it: flat key/value strings (JSON for numbers and
    the data hashes)."""
    return {
        k: v if isinstance(v, str) else json.dumps(v, sort_keys=True) for k, v in metadata.items()
    }


def _read_shard(path: Path) -> tuple[dict[str, Any], RobustnessReport]:
    """A robustness shard's metadata (its data hashes decoded) and its report."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from certbench.pd import RobustnessReport

    try:
        raw = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowInvalid) as err:
        raise StorageError(f"robustness shard {str(path)!r} is unreadable: {err}") from err
    metadata: dict[str, Any] = {k.decode(): v.decode() for k, v in raw.items()}
    if "data_hashes" in metadata:
        metadata["data_hashes"] = json.loads(metadata["data_hashes"])
    return metadata, RobustnessReport.read(path)


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
