"""Response shapes of paired tests between entries certified on the same images
(``/api/v1/leaderboards/{benchmark}/compare`` and the leaderboard's "tied with" marks): the
difference of one figure, its 95 % interval and p-value (``certbench.stats.intervals``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from certbench.stats import PairedTest


class DifferencePublic(BaseModel):
    estimate: float
    ci_low: float
    ci_high: float
    level: float
    method: str


class PairedTestPublic(BaseModel):
    """Entry A against entry B on the same images: the difference A − B of one figure (named by
    its leaderboard key), its 95 % interval and the two-sided p-value of no difference."""

    metric: str = Field(examples=["macr", "cert_acc_050", "band_low"])
    estimate_a: float
    estimate_b: float
    difference: DifferencePublic
    p_value: float
    method: str = Field(examples=["paired cluster bootstrap", "exact mcnemar"])
    tied: bool = Field(description="the difference is not significant at level `alpha` (0.05)")

    @classmethod
    def of(cls, metric: str, test: PairedTest, *, alpha: float) -> PairedTestPublic:
        d = test.difference
        return cls(
            metric=metric,
            estimate_a=test.estimate_a,
            estimate_b=test.estimate_b,
            difference=DifferencePublic(
                estimate=d.estimate, ci_low=d.low, ci_high=d.high, level=d.level, method=d.method
            ),
            p_value=test.p_value,
            method=test.method,
            tied=not test.significant(alpha),
        )


class ComparedEntry(BaseModel):
    submission_id: int
    model_name: str
    sigma: float


class PairComparisonPublic(BaseModel):
    a: int = Field(description="submission id of entry A")
    b: int = Field(description="submission id of entry B")
    tests: list[PairedTestPublic]


class ComparisonPublic(BaseModel):
    """Paired tests between entries of one benchmark, certified on the same images: mACR (ACR
    for one test set) and band means by paired bootstrap over the shared source images,
    certified accuracy at each radius by exact McNemar (one test set) or paired bootstrap."""

    benchmark: str
    alpha: float
    entries: list[ComparedEntry]
    pairs: list[PairComparisonPublic] = Field(description="every pair of the entries, A before B")
