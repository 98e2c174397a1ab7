"""Fourier-lens stage: HFF, consistent distance, pixel-path HFF and Jacobian norm of an entry.

Fridovich-Keil, Bartoldson, Diffenderfer, Kailkhura & Bremer, "Models Out of Line: A Fourier Lens
on Distribution Shift Robustness", NeurIPS 2022 (seed 003 §3, Tables 1–3): per model, on the
clean test set, the high-frequency fraction (HFF) and consistent distance (CD) along Fourier
amplitude and phase interpolation paths, the HFF of pixel-space paths within and between classes
(Fridovich-Keil, Gontijo Lopes & Roelofs 2021) and the Jacobian norm (Hoffman, Roberts & Yaida
2019). The science is ``certbench.lens.lens``; this module plans, shards and merges it.

Units are the classifier variants: ``base`` (the submission's deterministic network; every kind)
and, when the block says ``smoothed: true``, ``smoothed`` (paths scored with the smoothed
classifier's vote fractions at the submission's σ; no Jacobian, which is the base network's).
A unit's "images" are the core's work units (one path, or one Jacobian image) on the flat index
of ``lens_plan``: a shard is the range ``[start, stop)`` of that index, ``CERTBENCH_SHARD_SIZE``
work units long (a Fourier path is 100 forwards, a certified image 100,000, so lens shards are
short). Records depend only on (model, clean set, protocol, seed, work unit), so any sharding
merges to the records of one direct ``lens_records`` call.

Seeds, decided per draw (``certbench.lens.lens`` says why): the Fourier and pixel *pairs*
define what every entry of the benchmark is measured on, so they come from the benchmark's public
``lens_seed`` (in the fingerprint that makes figures comparable); the *noise* of the smoothed
unit and the random Jacobian projections (``jacobian_projections`` > 0) are Monte Carlo draws of
estimators that are only valid when independent of the model, so they come from the run's secret
seed (``item.seed``, commit-reveal: ``models.submissions.run_seeds``). Shard files, written while
the run goes on, carry the seed's commitment; merged records and stored seeds carry the revealed
seed (``run_seed_metadata``), and ``certbench fourier-lens --seed <revealed> --pairs-seed
<lens_seed>`` reproduces them. Exact base-classifier figures (the paper's Jacobian, every path's
softmax) do not depend on the run seed.

The plan's size is stored with the benchmark (``protocol_row``) from the definition alone, so the
API never loads data: Fourier paths, ``num_classes``·pixel_pairs within-class and
C(num_classes, 2)·pixel_pairs between-class paths, and the Jacobian images. Every shard checks it
against ``lens_plan(labels).size`` of the loaded clean set and fails the run with a clear message
when they differ (a class missing from the set, a wrong ``num_classes``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from models.benchmarks.definitions import BenchmarkSchema
from models.benchmarks.sources import TestSetSpec, image_source_spec
from models.core.errors import BenchmarkDefinitionError, StorageError
from models.core.settings import Settings
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
    recorded_data_hashes,
    run_seed_metadata,
)
from models.stages.lens_block import (
    BASE,
    KINDS,
    LENS_VERSION,
    METRICS,
    NYQUIST_METRICS,
    PAPER,
    PRESETS,
    SMOOTHED,
    SMOOTHED_SUFFIX,
    LensBlock,
    feasibility,
    fingerprint,
    work_estimate,
    work_sizes,
)
from models.stages.registry import register
from models.stages.work import WorkItem

__all__ = [
    "BASE", "KINDS", "LENS_VERSION", "METRICS", "NYQUIST_METRICS", "PAPER", "PRESETS", "SMOOTHED",
    "SMOOTHED_SUFFIX", "FourierLens", "LensBlock", "LensSpec", "figure_specs", "lens_spec",
]  # fmt: skip

if TYPE_CHECKING:
    import torch

    from certbench.lens import LensProtocol, LensRecord


@dataclass(frozen=True)
class LensSpec:
    """A stored ``fourier_lens`` row resolved against this deployment's folders."""

    images: TestSetSpec
    parameters: dict[str, Any]
    kinds: tuple[str, ...]
    pairs_seed: int
    """The benchmark's public ``lens_seed``: the pairs (never the noise; module docstring)."""
    noise_samples: int
    units: dict[str, int]
    label: str
    fingerprint: str
    row: dict[str, Any]

    def protocol(self, unit: str, sigma: float) -> LensProtocol:
        """The core protocol of one unit (``smoothed``: vote fractions at ``sigma``)."""
        from certbench.lens import LensProtocol

        kinds = self.kinds if unit == BASE else tuple(k for k in self.kinds if k != "jacobian")
        return LensProtocol(
            **self.parameters,
            kinds=kinds,
            sigma=sigma if unit == SMOOTHED else None,
            noise_samples=self.noise_samples,
        )

    def describe(self) -> dict[str, Any]:
        """The settings stored with a result: the row without local paths."""
        return {k: v for k, v in self.row.items() if k != "folder"}


def lens_spec(row: Mapping[str, Any], settings: Settings) -> LensSpec:
    """Resolve a benchmark's stored ``fourier_lens`` row."""
    return LensSpec(
        images=image_source_spec(row, name="_fourier_lens", settings=settings),
        parameters=dict(row["parameters"]),
        kinds=tuple(row["run_kinds"]),
        pairs_seed=int(row["lens_seed"]),
        noise_samples=int(row["noise_samples"]),
        units=dict(row["units"]),
        label=row["label"],
        fingerprint=row["fingerprint"],
        row=dict(row),
    )


@lru_cache(maxsize=1)
def _float_images(spec: TestSetSpec) -> torch.Tensor:
    """The clean set as float32 in [0, 1], converted once per worker process."""
    from models.stages.inputs import images_for

    return images_for(spec).as_float()


@register
class FourierLens(Stage):
    name = "fourier_lens"
    title = "Fourier lens (HFF, consistent distance, Jacobian norm)"
    queue = "certbench.lens"
    protocol_model = LensBlock
    default_batch_size = 1000
    batch_size_env = "CERTBENCH_LENS_BATCH_SIZE"

    def protocol_row(self, block: BaseModel, definition: BenchmarkSchema) -> dict[str, Any]:
        """The block plus the resolved protocol, the plan's size per unit and its fingerprint.

        Raises BenchmarkDefinitionError when the clean set cannot hold the protocol's pairs.
        """
        assert isinstance(block, LensBlock)
        skip, limit, count = block.subset(definition.protocol)
        parameters = block.parameters()
        problems = feasibility(block, parameters, count, definition.num_classes)
        if problems:
            raise BenchmarkDefinitionError(
                f"benchmark {definition.name!r} stages.fourier_lens: {'; '.join(problems)}"
            )
        kinds = block.run_kinds()
        sizes = work_sizes(parameters, kinds, definition.num_classes)
        units = {BASE: sum(sizes.values())}
        if block.smoothed:
            units[SMOOTHED] = sum(n for k, n in sizes.items() if k != "jacobian")
        row = block.model_dump(mode="json")
        row.update(
            subset_skip=skip,
            subset_limit=limit,
            num_images=count,
            parameters=parameters,
            run_kinds=kinds,
            lens_seed=block.seed if block.seed is not None else definition.protocol.seed,
            label=block.label(),
            lens_version=LENS_VERSION,
            work=sizes,
            units=units,
        )
        row["fingerprint"] = fingerprint({**row, "seed": row["lens_seed"]})
        return row

    def units(self, item: WorkItem, settings: Settings) -> list[Unit]:
        return [Unit(name, size) for name, size in item.stages[self.name]["units"].items()]

    def estimate(self, item: WorkItem, settings: Settings) -> StageEstimate:
        """Per kind, from the stored plan and the entry's preprocessing (``work_estimate``)."""
        return work_estimate(item.stages[self.name], item.manifest, item.num_classes)

    def run(self, item: WorkItem, shard: ShardSpec, context: RunContext) -> ShardOutput:
        """Compute the shard's work units with ``lens_records`` and write their records."""
        from certbench.errors import DataSourceError, LensError
        from certbench.lens import lens_plan, lens_records, write_lens_records
        from models.stages.inputs import data_hashes, images_for, model_for

        spec = lens_spec(item.stages[self.name], context.settings)
        hashes = data_hashes(spec.images)  # raises DatasetMismatchError before any work
        images = images_for(spec.images)
        protocol = spec.protocol(shard.unit, item.sigma)
        try:
            planned = lens_plan(images.labels, protocol, spec.pairs_seed).size
        except LensError as err:
            raise DataSourceError(
                f"the clean set {spec.images.source!r} cannot hold the benchmark's Fourier-lens "
                f"protocol: {err}; fix the benchmark definition"
            ) from err
        if planned != spec.units[shard.unit]:
            raise DataSourceError(
                f"the Fourier-lens plan of {spec.images.source!r} has {planned} work units but "
                f"the benchmark stored {spec.units[shard.unit]} for {shard.unit!r}: the clean "
                f"set lacks a class or num_classes ({item.num_classes}) is wrong; fix the "
                "benchmark definition"
            )
        records = lens_records(
            model_for(item, context.device),
            _float_images(spec.images),
            images.labels,
            protocol=protocol,
            seed=item.seed,
            pairs_seed=spec.pairs_seed,
            units=range(shard.start, shard.stop),
            indices=images.indices,
            batch_size=context.batch_size,
            device=context.device,
            on_progress=context.on_progress,
        )
        metadata = {
            "submission_id": item.submission_id,
            "benchmark": item.benchmark,
            "unit": shard.unit,
            "shard_index": shard.shard_index,
            "start": shard.start,
            "stop": shard.stop,
            "fingerprint": spec.fingerprint,
            "protocol": protocol.to_dict(),
            "pairs_seed": spec.pairs_seed,
            # shard files exist before the run ends: the noise seed's commitment only
            "seed_commitment": item.seed_commitment,
            "data_hashes": hashes,
        }
        write_lens_records(records, context.target, metadata)
        return ShardOutput(count=len(records), noun="lens unit(s)")

    def merge(
        self,
        item: WorkItem,
        shards: Mapping[str, Sequence[RecordedShard]],
        context: MergeContext,
        settings: Settings,
    ) -> StageOutcome:
        """Per unit: merged records, their summary (means, 95 % intervals); the means are the
        leaderboard figures (``<metric>_smoothed`` for the smoothed unit)."""
        spec = lens_spec(item.stages[self.name], settings)
        results, metrics = [], dict.fromkeys(self.metric_keys(spec.row))
        wanted = set(metrics)
        for unit, size in spec.units.items():
            result, means = self._merge_unit(item, spec, unit, size, shards[unit], context)
            if unit == BASE:
                nyquist = result.summary.get("nyquist", {})
                metrics.update({k: v["mean"] for k, v in nyquist.items() if k in wanted})
            results.append(result)
            suffix = "" if unit == BASE else SMOOTHED_SUFFIX
            metrics.update({f"{name}{suffix}": value for name, value in means.items()})
        paths = results[0].count
        return StageOutcome(
            results=results,
            metrics=metrics,
            message=f"Fourier lens ({spec.label}): {paths} path(s) and Jacobian image(s)",
        )

    def _merge_unit(
        self,
        item: WorkItem,
        spec: LensSpec,
        unit: str,
        size: int,
        recorded: Sequence[RecordedShard],
        context: MergeContext,
    ) -> tuple[UnitResult, dict[str, float]]:
        from certbench.errors import LensError
        from certbench.lens import read_lens_metadata, read_lens_records, summarize
        from certbench.lens import write_lens_records as write

        ordered = sorted(recorded, key=lambda s: s.start)
        records: list[LensRecord] = []
        hashes: list[Any] = []
        for shard in ordered:
            try:
                metadata = read_lens_metadata(shard.path)
                records += read_lens_records(shard.path)
                hashes.append(metadata.get("data_hashes"))
            except LensError as err:
                raise StorageError(f"Fourier-lens shard {str(shard.path)!r}: {err}") from err
            check_shard_seed(item, metadata, f"Fourier-lens shard {str(shard.path)!r}")
            found = metadata.get("fingerprint")
            if found != spec.fingerprint:
                raise StorageError(
                    f"Fourier-lens shard {str(shard.path)!r} was computed under another protocol "
                    f"(fingerprint {str(found)[:12]}…, benchmark {spec.fingerprint[:12]}…); "
                    "re-run the submission fresh"
                )
        if [r.unit for r in records] != list(range(size)):
            raise StorageError(
                f"the {unit!r} Fourier-lens records of submission {item.submission_id} do not "
                f"cover work units 0 … {size - 1} once each; re-run the submission fresh"
            )
        summary = summarize(records)
        relpath, target = context.target_for(unit)
        write(
            records,
            target,
            {
                "submission_id": item.submission_id,
                "benchmark": item.benchmark,
                "unit": unit,
                "fingerprint": spec.fingerprint,
                "evaluator_version": context.evaluator_version,
                **run_seed_metadata(item),
                "pairs_seed": spec.pairs_seed,
            },
        )
        sigma = item.sigma if unit == SMOOTHED else None
        core = spec.protocol(unit, item.sigma).to_dict()
        result = UnitResult(
            unit=unit,
            summary={"label": spec.label, "sigma": sigma, **summary.to_dict()},
            records_path=relpath,
            count=len(records),
            seconds=float(sum(s.seconds for s in ordered)),
            protocol={**spec.describe(), "unit_protocol": core},
            seeds={**run_seed_metadata(item), "pairs_seed": spec.pairs_seed},
            data_hashes=recorded_data_hashes(
                hashes, where=f"Fourier-lens unit {unit!r} of submission {item.submission_id}"
            ),
        )
        return result, summary.means()

    # ---- uncertainty ----------------------------------------------------------------------------

    has_intervals = True

    def uncertainty(
        self, protocol: Mapping[str, Any] | None, records: Mapping[str, Path]
    ) -> Uncertainty:
        """The summaries' Gaussian intervals; path terms for paired bootstrap tests."""
        from models.stages.stage_intervals import lens_uncertainty

        suffixes = {unit: "" if unit == BASE else SMOOTHED_SUFFIX for unit in records}
        return lens_uncertainty(records, suffixes, self.metric_keys(protocol or {}))

    # ---- presentation ---------------------------------------------------------------------------

    def metric_keys(self, protocol: Mapping[str, Any]) -> list[str]:
        """Every figure a benchmark with this protocol stores (None where a kind is not run)."""
        keys = list(METRICS) + list(NYQUIST_METRICS)
        if protocol.get("smoothed"):
            keys += [f"{k}{SMOOTHED_SUFFIX}" for k, kind in METRICS.items() if kind != "jacobian"]
        return keys

    def all_metric_specs(self) -> list[MetricSpec]:
        return self.metric_specs(
            {"run_kinds": list(KINDS), "smoothed": True, "label": "paper"}, test_sets=1, bands=()
        )

    def metric_specs(
        self, protocol: Mapping[str, Any] | None, *, test_sets: int, bands: Sequence[str]
    ) -> list[MetricSpec]:
        """The base classifier's seven lens figures as columns (kinds the benchmark runs); the
        smoothed classifier's as REST fields and sort keys only."""
        if protocol is None:
            return []
        kinds = set(protocol.get("run_kinds", KINDS))
        label = protocol.get("label", "paper")
        specs = [spec for key, spec in figure_specs(label).items() if METRICS[key] in kinds]
        specs += [
            spec for key, spec in nyquist_specs(label).items() if NYQUIST_METRICS[key] in kinds
        ]
        if protocol.get("smoothed"):
            specs += [
                MetricSpec(
                    f"{spec.key}{SMOOTHED_SUFFIX}",
                    f"{spec.label} (smoothed)",
                    f"{spec.help}; scored with the smoothed classifier's vote fractions at the "
                    "entry's σ",
                    spec.kind,
                    spec.higher_is_better,
                    group="lens",
                    column=False,
                )
                for key, spec in figure_specs(label).items()
                if METRICS[key] in kinds and METRICS[key] != "jacobian"
            ]
        return specs


def nyquist_specs(label: str) -> dict[str, MetricSpec]:
    """The secondary HFF figures (REST fields and sort keys, no column): the paper's equation as
    written, the Nyquist bin kept in the numerator."""
    out = {}
    for key, spec in figure_specs(label).items():
        name = f"{key}_nyquist"
        if name in NYQUIST_METRICS:
            out[name] = MetricSpec(
                name,
                f"{spec.label} (Nyquist kept)",
                f"{spec.help}; here as the paper's equation reads, the Nyquist bin kept in the "
                "numerator (the headline column leaves it out, as the released code behind the "
                "published values does)",
                spec.kind,
                spec.higher_is_better,
                group="lens",
                column=False,
            )
    return out


def figure_specs(label: str) -> dict[str, MetricSpec]:
    """The base classifier's lens figures; ``label`` names the protocol in every help text."""
    where = f"base classifier, {label} protocol; {PAPER}"

    def spec(key: str, header: str, text: str, higher: bool) -> MetricSpec:
        return MetricSpec(key, header, f"{text} ({where})", "number", higher, group="lens")

    hff = (
        "mean high-frequency fraction of the class probabilities along Fourier {what} "
        "interpolation paths between clean test images, the Nyquist bin left out as in the "
        "released RobustNets code behind the paper's published values: lower is smoother"
    )
    cd = (
        "mean consistent distance along Fourier {what} interpolation paths: how many of the "
        "100 images keep the first image's prediction (100 = never changes)"
    )
    return {
        "hff_amplitude": spec("hff_amplitude", "HFF amp", hff.format(what="amplitude"), False),
        "hff_phase": spec("hff_phase", "HFF phase", hff.format(what="phase"), False),
        "cd_amplitude": spec("cd_amplitude", "CD amp", cd.format(what="amplitude"), True),
        "cd_phase": spec("cd_phase", "CD phase", cd.format(what="phase"), True),
        "hff_pixel_within": spec(
            "hff_pixel_within",
            "HFF pixel within",
            "mean high-frequency fraction along pixel-space paths between images of the same "
            "class (Fridovich-Keil, Gontijo Lopes & Roelofs 2021), Nyquist bin left out as in "
            "the released code: lower is smoother",
            False,
        ),
        "hff_pixel_between": spec(
            "hff_pixel_between",
            "HFF pixel between",
            "mean high-frequency fraction along pixel-space paths between images of different "
            "classes, Nyquist bin left out as in the released code; sharp class boundaries "
            "score higher, and Fridovich-Keil et al. 2021 found higher values in models that "
            "generalise better",
            True,
        ),
        "jacobian_norm": spec(
            "jacobian_norm",
            "‖J‖",
            "root-mean-square Frobenius norm of the Jacobian of the logits w.r.t. the input "
            "pixels, per unit pixel, [0,1] scale (Hoffman, Roberts & Yaida 2019): lower is "
            "locally smoother; the paper's normalised-space value is this × the std s of a "
            "scalar normalisation (between min_c s_c and max_c s_c times it per channel)",
            False,
        ),
    }
