"""Public shapes of the effective-robustness analysis (``/api/v1/analysis/...``).

Kept apart from ``api.schemas.leaderboard`` (the resources of the leaderboard) because these are
derived views, recomputed on every read. Non-finite numbers (an undefined slope) are served as null.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, Field

from api.schemas.leaderboard import ER_HELP
from api.services.analysis import (
    Analysis,
    OODSet,
    Point,
    SigmaGroup,
    TrendResult,
)
from api.services.analysis_data import MODEL_FIELDS
from certbench.lens import Accuracy, ArchitectureFit, PredictorFit

MATCHING = (
    "an OOD entry is paired with the clean-benchmark entry of the same classifier: same weights "
    f"(artifact SHA-256), same manifest {', '.join(MODEL_FIELDS)} and same σ; the earliest "
    "visible submission stands for a model entered twice"
)


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


class AccuracyPublic(BaseModel):
    """``correct`` of ``total`` images with the two-sided 95 % Clopper–Pearson interval."""

    correct: int
    total: int
    value: float
    low: float
    high: float

    @classmethod
    def of(cls, accuracy: Accuracy) -> AccuracyPublic:
        low, high = accuracy.clopper_pearson()
        return cls(
            correct=accuracy.correct, total=accuracy.total, value=accuracy.value, low=low, high=high
        )


class ERPublic(BaseModel):
    value: float = Field(description=ER_HELP)
    low: float
    high: float
    se: float
    expected_accuracy: float = Field(description="Φ(line at the entry's ID accuracy)")
    accuracy_gain: float = Field(description="OOD accuracy − expected_accuracy")


class PointPublic(BaseModel):
    submission_id: int = Field(description="the entry on the OOD benchmark")
    id_submission_id: int = Field(description="the same classifier's entry on the clean benchmark")
    model_name: str
    owner: str
    id_accuracy: AccuracyPublic
    ood_accuracy: AccuracyPublic
    effective_robustness: ERPublic | None

    @classmethod
    def of(cls, point: Point) -> PointPublic:
        er = point.er
        return cls(
            submission_id=point.submission_id,
            id_submission_id=point.id_submission_id,
            model_name=point.model_name,
            owner=point.owner,
            id_accuracy=AccuracyPublic.of(point.id_accuracy),
            ood_accuracy=AccuracyPublic.of(point.ood_accuracy),
            effective_robustness=None
            if er is None
            else ERPublic(
                value=er.value,
                low=er.low,
                high=er.high,
                se=er.se,
                expected_accuracy=er.expected_accuracy,
                accuracy_gain=er.accuracy_gain,
            ),
        )


class OODSetPublic(BaseModel):
    key: str = Field(description="<benchmark>, <benchmark>/band:<band> or <benchmark>/<test set>")
    benchmark: str
    scope: Literal["aggregate", "band", "test_set"]
    name: str

    @classmethod
    def of(cls, ood: OODSet) -> OODSetPublic:
        return cls(key=ood.key, benchmark=ood.benchmark, scope=ood.scope, name=ood.name)


class FitPublic(BaseModel):
    slope: float
    intercept: float
    r2: float
    n: int


class TrendPublic(BaseModel):
    ood: OODSetPublic
    fit: FitPublic | None = Field(
        description="Φ⁻¹(OOD) = intercept + slope·Φ⁻¹(ID) by least squares; null when fewer than "
        "3 entries have this set or their ID accuracies are all equal (see reason)"
    )
    reason: str
    entries: list[PointPublic] = Field(description="by effective robustness, highest first")

    @classmethod
    def of(cls, trend: TrendResult) -> TrendPublic:
        fit = trend.fit
        return cls(
            ood=OODSetPublic.of(trend.ood),
            fit=None
            if fit is None
            else FitPublic(slope=fit.slope, intercept=fit.intercept, r2=fit.r2, n=fit.n),
            reason=trend.reason,
            entries=[PointPublic.of(p) for p in trend.points],
        )


class SigmaTrendsPublic(BaseModel):
    sigma: float
    entries: int = Field(description="clean-benchmark entries matched to an OOD entry at this σ")
    unmatched: int = Field(description="OOD entries at this σ with no clean-benchmark partner")
    trends: list[TrendPublic]


class AnalysisHeader(BaseModel):
    benchmark: str
    id_benchmark: str
    ood_benchmarks: list[str]
    id_accuracy: Literal["smoothed", "base"] = Field(
        description="smoothed: certified accuracy at r = 0 on the clean benchmark "
        "(cert_acc_000); base: the base classifier's clean accuracy (base_accuracy)"
    )
    level: float
    matching: str = MATCHING


class EffectiveRobustnessPublic(AnalysisHeader):
    """Per σ and OOD set: the probit-domain trend across entries and each entry's ER."""

    groups: list[SigmaTrendsPublic]

    @classmethod
    def of(cls, name: str, analysis: Analysis) -> EffectiveRobustnessPublic:
        return cls(
            **_header(name, analysis),
            groups=[
                SigmaTrendsPublic(
                    sigma=g.sigma,
                    entries=len(g.entries),
                    unmatched=g.unmatched,
                    trends=[TrendPublic.of(t) for t in g.trends],
                )
                for g in analysis.groups
            ],
        )


class PredictorPublic(BaseModel):
    metric: str
    slope: float | None
    intercept: float | None
    r2: float | None
    n: int

    @classmethod
    def of(cls, fit: PredictorFit) -> PredictorPublic:
        return cls(
            metric=fit.metric,
            slope=_finite(fit.slope),
            intercept=_finite(fit.intercept),
            r2=_finite(fit.r2),
            n=fit.n,
        )


class ArchitecturePredictorPublic(BaseModel):
    """One metric as the paper's tables report it: slope and R² averaged over the architectures
    with a line (``fitted`` of them), each architecture's own fit beside."""

    metric: str
    slope: float | None
    r2: float | None
    n: int = Field(description="entries inside the fitted architectures")
    fitted: int = Field(description="architectures averaged (those with ≥ 3 usable entries)")
    counts: dict[str, int] = Field(description="entries carrying the metric, per architecture")
    architectures: dict[str, PredictorPublic]

    @classmethod
    def of(cls, fit: ArchitectureFit) -> ArchitecturePredictorPublic:
        return cls(
            metric=fit.metric,
            slope=_finite(fit.slope),
            r2=_finite(fit.r2),
            n=fit.n,
            fitted=fit.fitted,
            counts=fit.counts,
            architectures={arch: PredictorPublic.of(f) for arch, f in fit.fits.items()},
        )


class PredictorRowPublic(BaseModel):
    ood: OODSetPublic
    predictors: list[ArchitecturePredictorPublic] = Field(
        description="the paper's view (Tables 1–3): per architecture, averaged"
    )
    pooled: list[PredictorPublic] = Field(
        description="second view, not the paper's: one line through every entry of the σ"
    )


class SigmaPredictorsPublic(BaseModel):
    sigma: float
    entries: int
    metrics: list[str] = Field(
        description="id_accuracy (its probit) then the Fourier-lens figures measured under the "
        "clean benchmark's current lens protocol"
    )
    lens_excluded: int = Field(
        description="entries whose lens figures were computed under an older lens protocol and "
        "are left out of the metric fits"
    )
    architectures: dict[str, int] = Field(description="entries per architecture at this σ")
    rows: list[PredictorRowPublic]


class MetricPredictorsPublic(AnalysisHeader):
    """Which metric explains OOD accuracy: per σ and OOD set, slope m and R² of the least-squares
    line Φ⁻¹(OOD accuracy) = c + m·metric, fitted per architecture and averaged over
    architectures as in Fridovich-Keil et al. 2022, Tables 1–3 (``predictors``), and pooled over
    every entry as a second view (``pooled``)."""

    groups: list[SigmaPredictorsPublic]

    @classmethod
    def of(cls, name: str, analysis: Analysis) -> MetricPredictorsPublic:
        return cls(**_header(name, analysis), groups=[_predictors(g) for g in analysis.groups])


def _predictors(group: SigmaGroup) -> SigmaPredictorsPublic:
    rows = [
        PredictorRowPublic(
            ood=OODSetPublic.of(t.ood),
            predictors=[
                ArchitecturePredictorPublic.of(p) for p in group.predictors.get(t.ood.key, [])
            ],
            pooled=[PredictorPublic.of(p) for p in group.pooled.get(t.ood.key, [])],
        )
        for t in group.trends
    ]
    return SigmaPredictorsPublic(
        sigma=group.sigma,
        entries=len(group.entries),
        metrics=group.metrics,
        lens_excluded=group.lens_excluded,
        architectures=group.architectures,
        rows=rows,
    )


def _header(name: str, analysis: Analysis) -> dict[str, Any]:
    return {
        "benchmark": name,
        "id_benchmark": analysis.family.clean.name,
        "ood_benchmarks": [b.name for b in analysis.family.oods],
        "id_accuracy": analysis.id_source,
        "level": analysis.level,
    }
