"""Response shapes of one submission's results (``/api/v1/results/{submission_id}``): per test
set certification results, base-classifier robustness, every stage's stored summary and the p_A
band. Non-finite numbers are served as null (JSON has no NaN); protocols without local paths."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field

from api.schemas.benchmark import public_protocol
from api.schemas.leaderboard import LINF_HELP, PD_HELP, Metrics
from api.schemas.submission import SeedPublic
from api.schemas.zoo import WeightsLinkPublic
from models.db.entities import StageResult
from models.db.states import SubmissionState
from models.stages.certification.stage import TestSetResult
from models.stages.pd_robustness.stage import RobustnessResult


class TestSetResultPublic(BaseModel):
    __test__ = False

    test_set: str
    band: str | None
    attributes: dict[str, Any]
    acr: float
    certified_accuracy: dict[str, float]
    clean_accuracy: float
    abstain_rate: float
    pa_median: float
    pa_quantiles: dict[str, float]
    count: int
    seconds: float
    protocol_version: str
    evaluator_version: str
    records_url: str
    intervals: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "95 % intervals over this test set's images: acr (bootstrap), certified_accuracy by "
            "radius, clean_accuracy and abstain_rate (Clopper-Pearson), pa_quantiles "
            "(bootstrap), each {estimate, ci_low, ci_high, level, method}; pa_band_half_width "
            "of the simultaneous band on the p_A curve"
        ),
    )

    @classmethod
    def of(cls, result: TestSetResult, *, records_url: str) -> TestSetResultPublic:
        return cls(
            test_set=result.test_set.name,
            band=result.test_set.band,
            attributes=dict(result.test_set.attributes),
            acr=result.acr,
            certified_accuracy=dict(result.certified_accuracy),
            clean_accuracy=result.clean_accuracy,
            abstain_rate=result.abstain_rate,
            pa_median=result.pa_median,
            pa_quantiles=dict(result.pa_quantiles),
            count=result.count,
            seconds=result.seconds,
            protocol_version=result.protocol_version,
            evaluator_version=result.evaluator_version,
            records_url=records_url,
            intervals=_json_safe(result.intervals),
        )


class RobustnessPublic(BaseModel):
    """Robustness of the submission's base classifier (Muthukumar et al. 2025, §6): the
    deterministic model,
    not the smoothed one, attacked on the benchmark's clean subset. Accuracies are fractions of
    ``count`` images; ε is in units of 1/255."""

    base_accuracy: float = Field(
        description="clean accuracy of the base classifier (deterministic model, not smoothed)"
    )
    linf_acc_8: float | None = Field(description=LINF_HELP.format(eps=8))
    linf_acc_16: float | None = Field(description=LINF_HELP.format(eps=16))
    pd_acc_8: float | None = Field(description=PD_HELP.format(eps=8))
    pd_acc_16: float | None = Field(description=PD_HELP.format(eps=16))
    figures: dict[str, float | None] = Field(
        description=(
            "every figure of the report: clean_accuracy, count and, per ε tag t (8, 16 = ε in "
            "1/255): linf_robust_accuracy_t, pd_robust_accuracy_t (ℓ∞ ∩ PD), "
            "pd_projected_accuracy_t (ℓ∞ APGD then lazy PD projection alone, the paper's "
            "protocol), pd_aware_accuracy_t (PD-aware APGD alone), linf_pd_threat_median_t "
            "(median d_PD of the ℓ∞ adversarial examples; null when none was found)"
        ),
        examples=[
            {
                "clean_accuracy": 0.92,
                "count": 500,
                "linf_robust_accuracy_8": 0.41,
                "pd_robust_accuracy_8": 0.63,
                "pd_projected_accuracy_8": 0.71,
                "pd_aware_accuracy_8": 0.66,
                "linf_pd_threat_median_8": 0.037,
            }
        ],
    )
    protocol: dict[str, Any] = Field(
        description=(
            "attack settings and the anchor bank's provenance: benchmark protocol (eps in 1/255 "
            "units, k, anchor_seed, n_iter, n_target_classes, projection, weighting, image "
            "subset) plus anchors_sha256 of the bank actually used"
        )
    )
    count: int = Field(description="clean images attacked")
    seconds: float = Field(description="attack time summed over shards")
    evaluator_version: str

    @classmethod
    def of(cls, result: RobustnessResult) -> RobustnessPublic:
        return cls(
            base_accuracy=result.base_accuracy,
            linf_acc_8=result.linf_acc_8,
            linf_acc_16=result.linf_acc_16,
            pd_acc_8=result.pd_acc_8,
            pd_acc_16=result.pd_acc_16,
            figures={k: _finite_or_none(v) for k, v in result.figures.items()},
            protocol=public_protocol(result.protocol) or {},
            count=result.count,
            seconds=result.seconds,
            evaluator_version=result.evaluator_version,
        )


def _finite_or_none(value: float | None) -> float | None:
    """JSON has no NaN: an undefined figure (e.g. a median of no examples) is served as null."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


class StageResultPublic(BaseModel):
    """One stored result of an evaluation stage: its unit (a test set, or empty for a stage with
    one unit), the stage's JSON summary, the protocol as run (no local paths) and seeds."""

    stage: str
    unit: str
    summary: dict[str, Any]
    protocol: dict[str, Any]
    seeds: dict[str, Any]
    data_hashes: dict[str, Any]
    count: int
    seconds: float
    evaluator_version: str

    @classmethod
    def of(cls, row: StageResult) -> StageResultPublic:
        return cls(
            stage=row.stage,
            unit=row.unit,
            summary=_json_safe(row.summary),
            protocol=public_protocol(row.protocol) or {},
            seeds=dict(row.seeds),
            data_hashes=dict(row.data_hashes),
            count=row.count,
            seconds=row.seconds,
            evaluator_version=row.evaluator_version,
        )


def _json_safe(value: Any) -> Any:
    """Non-finite floats become null (JSON has no NaN), recursively."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if isinstance(value, float):
        return _finite_or_none(value)
    return value


class PaBandPublic(BaseModel):
    """Simultaneous 95 % band around the entry's p_A curve (the complementary ECDF of Sun, Mao,
    Müller & Vechev 2025, averaged over test sets): every point of the curve ± ``half_width``
    covers the true curve at once. One test set: the exact Kolmogorov band. Several: each test
    set's band at level 1 − 0.05/S (Bonferroni), half-widths averaged; each test set's own band
    is ``results[i].intervals.pa_band_half_width``."""

    half_width: float
    level: float
    method: str = Field(examples=["kolmogorov", "kolmogorov, bonferroni over test sets"])
    test_sets: int


class ResultsPublic(BaseModel):
    submission_id: int
    benchmark: str
    model_name: str
    state: SubmissionState
    protocol_version: str
    manifest: dict[str, Any]
    summary: Metrics | None
    results: list[TestSetResultPublic]
    robustness: RobustnessPublic | None = Field(
        default=None,
        description=(
            "base-classifier robustness (Muthukumar et al. 2025); null for a benchmark without "
            "the stage or "
            "before it is measured"
        ),
    )
    stages: list[StageResultPublic] = Field(
        default_factory=list,
        description="every stored stage result (each stage's summary per unit), for any stage",
    )
    seed: SeedPublic | None = Field(
        default=None,
        description="the run's noise seed: its commitment, and the seed once the run has ended",
    )
    weights: WeightsLinkPublic | None = Field(
        default=None,
        description="model zoo: where to download the weights when the submitter published "
        "them under a licence and the entry is finished, public and visible; null otherwise",
    )
    pa_band: PaBandPublic | None = Field(
        default=None,
        description="simultaneous 95 % band of the p_A curve over the test sets; null before "
        "results exist",
    )
