"""``/api/v1/analysis/{benchmark}/...``: effective robustness across the leaderboard and which
model metric explains OOD accuracy (Fridovich-Keil et al. 2022), computed on every read from the
stored results the caller may see."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from api.deps import OptionalUser, SessionDep
from api.errors import ERROR_RESPONSES
from api.schemas.analysis import EffectiveRobustnessPublic, MetricPredictorsPublic
from api.services import analysis as service

router = APIRouter(prefix="/analysis", tags=["analysis"], responses=ERROR_RESPONSES)

IdParam = Annotated[
    Literal["smoothed", "base"],
    Query(
        alias="id",
        description="ID accuracy: smoothed = certified accuracy at r = 0 on the clean benchmark; "
        "base = the base classifier's clean accuracy (entries without it are left out)",
    ),
]
SigmaParam = Annotated[float | None, Query(gt=0, description="only this σ (default: every σ)")]
ScopeParam = Annotated[
    list[Literal["aggregate", "band", "test_set"]] | None,
    Query(description="which OOD sets: benchmark aggregate, bands, test sets (default: all)"),
]
OodParam = Annotated[
    list[str] | None,
    Query(
        max_length=400,
        description="only these OOD set keys: <benchmark>, <benchmark>/band:<band>, "
        "<benchmark>/<test set> (overrides scope)",
    ),
]
LevelParam = Annotated[float, Query(ge=0.5, le=0.999, description="level of the ER intervals")]
IdBenchmarkParam = Annotated[
    str | None,
    Query(
        max_length=64,
        description="the clean (ID) benchmark; default: the family's benchmark named like its "
        "base dataset",
    ),
]


@router.get("/{benchmark}/effective-robustness", response_model=EffectiveRobustnessPublic)
def get_effective_robustness(
    session: SessionDep,
    viewer: OptionalUser,
    benchmark: str,
    id_source: IdParam = "smoothed",
    sigma: SigmaParam = None,
    scope: ScopeParam = None,
    ood: OodParam = None,
    level: LevelParam = 0.95,
    id_benchmark: IdBenchmarkParam = None,
) -> EffectiveRobustnessPublic:
    """Per σ (never mixed) and per OOD set of the benchmark (of the whole family for its clean
    benchmark): the probit-domain fit of OOD accuracy against ID accuracy across the matched
    entries you can see (slope, intercept, R², n) and every entry's effective robustness with
    its interval, highest first. Accuracies carry 95 % Clopper–Pearson intervals."""
    analysis = service.analyse(
        session, benchmark, viewer=viewer, id_source=id_source, sigma=sigma,
        scopes=scope or service.SCOPES, ood=ood or (), level=level, id_benchmark=id_benchmark,
        predictors=False,
    )  # fmt: skip
    return EffectiveRobustnessPublic.of(benchmark, analysis)


@router.get("/{benchmark}/metric-predictors", response_model=MetricPredictorsPublic)
def get_metric_predictors(
    session: SessionDep,
    viewer: OptionalUser,
    benchmark: str,
    id_source: IdParam = "smoothed",
    sigma: SigmaParam = None,
    scope: ScopeParam = None,
    ood: OodParam = None,
    id_benchmark: IdBenchmarkParam = None,
) -> MetricPredictorsPublic:
    """Which metric explains robustness: per σ and OOD set, slope m and R² of each metric (ID
    accuracy's probit, HFF and CD of Fourier amplitude/phase paths, pixel-path HFF within and
    between classes, Jacobian norm) as the predictor of probit OOD accuracy, as in
    Fridovich-Keil et al. 2022 Tables 1–3."""
    analysis = service.analyse(
        session, benchmark, viewer=viewer, id_source=id_source, sigma=sigma,
        scopes=scope or service.SCOPES, ood=ood or (), id_benchmark=id_benchmark,
    )  # fmt: skip
    return MetricPredictorsPublic.of(benchmark, analysis)
