"""Response shapes of the leaderboard (``/api/v1/leaderboards/{benchmark}``): ranked rows with
their metrics and 95 % intervals, ties with the entry above, effective robustness and the filter
facets. Built from ``models.boards.leaderboard`` pages by ``LeaderboardPublic.of``."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.comparison import PairedTestPublic
from api.schemas.zoo import MANIFEST_URL, WEIGHTS_URL, WeightsLinkPublic
from models.boards.leaderboard import HIGHER_IS_BETTER, LeaderboardPage
from models.db.entities import LeaderboardEntry
from models.stages.base import CI_HIGH, CI_LOW

BASE_ACCURACY_HELP = (
    "clean accuracy of the base classifier (the deterministic model, not smoothed) on the "
    "robustness stage's clean subset; null without that stage"
)
LINF_HELP = (
    "robust accuracy of the base classifier (not smoothed) under ℓ∞ APGD at ε = {eps}/255 "
    "(ε in units of 1/255); null without the robustness stage or when that ε is not attacked"
)
PD_HELP = (
    "robust accuracy of the base classifier (not smoothed) under ℓ∞ ∩ PD at ε = {eps}/255 (ε in "
    "units of 1/255): the worse of ℓ∞ APGD + lazy PD projection and PD-aware APGD "
    "(Muthukumar et al. 2025); "
    "null without the robustness stage or when that ε is not attacked"
)


class IntervalPublic(BaseModel):
    """A 95 % interval over the sampled images (``certbench.stats.entry_intervals``)."""

    ci_low: float | None
    ci_high: float | None


class Metrics(BaseModel):
    """Means over the benchmark's test sets (mACR = mean ACR; bands as in Sun et al. 2022, ECCV),
    and the base classifier's robustness (Muthukumar et al. 2025) where the benchmark has that
    stage. Figures of other
    evaluation stages appear as further keys (their metric keys), null when not measured.

    Every figure of every stage carries its 95 % interval over the sampled images, both as
    sibling fields ``<key>_ci_low``/``<key>_ci_high`` and in ``intervals``: Clopper-Pearson for
    an accuracy of one set of images, a bootstrap over images (cluster bootstrap over images
    shared by several sets) for means, and for Fourier-lens means the Gaussian interval of
    Fridovich-Keil et al. (2022)."""

    model_config = ConfigDict(extra="allow")

    macr: float
    cert_acc_000: float
    cert_acc_025: float
    cert_acc_050: float
    cert_acc_075: float
    cert_acc_100: float
    clean_accuracy: float
    abstain_rate: float
    pa_median: float
    pa_q10: float | None
    pa_q25: float | None
    pa_q75: float | None
    pa_q90: float | None
    band_low: float | None
    band_mid: float | None
    band_high: float | None
    base_accuracy: float | None = Field(description=BASE_ACCURACY_HELP)
    linf_acc_8: float | None = Field(description=LINF_HELP.format(eps=8))
    linf_acc_16: float | None = Field(description=LINF_HELP.format(eps=16))
    pd_acc_8: float | None = Field(description=PD_HELP.format(eps=8))
    pd_acc_16: float | None = Field(description=PD_HELP.format(eps=16))
    test_sets: int
    count: int
    seconds: float
    intervals: dict[str, IntervalPublic] = Field(
        default_factory=dict,
        description=(
            "95 % interval over the sampled images of each figure of every stage (key → "
            "ci_low, ci_high): Clopper-Pearson for a proportion on one set of images (a test "
            "set, the robustness subset, one weather set), else a bootstrap over images (a "
            "cluster bootstrap when the figure averages several sets of the same images), "
            "Gaussian for Fourier-lens means; null bounds for a figure not measured. Empty for "
            "an entry aggregated before intervals (`certbench results backfill-intervals` "
            "fills it)"
        ),
    )

    @classmethod
    def of(cls, entry: LeaderboardEntry) -> Metrics:
        """The figures of a loaded entry (one submission's results page)."""
        return cls.of_figures(
            entry.metrics, test_sets=entry.test_sets, count=entry.count, seconds=entry.seconds
        )

    @classmethod
    def of_figures(
        cls, figures: dict[str, float | None], *, test_sets: int, count: int, seconds: float
    ) -> Metrics:
        """The figures of an entry by key (the read model's ``figures``; a key missing is a
        figure not measured: null)."""
        fixed = {"test_sets": test_sets, "count": count, "seconds": seconds}
        values = {name: figures.get(name) for name in _DECLARED if name not in fixed}
        extra = {k: v for k, v in figures.items() if k not in cls.model_fields}
        intervals = {
            key.removesuffix(CI_LOW): IntervalPublic(
                ci_low=low, ci_high=figures.get(key.removesuffix(CI_LOW) + CI_HIGH)
            )
            for key, low in sorted(figures.items())
            if key.endswith(CI_LOW)
        }
        return cls.model_validate({**values, **fixed, **extra, "intervals": intervals})


_DECLARED = frozenset(Metrics.model_fields) - {"intervals"}


class TiePublic(BaseModel):
    """This entry against the entry ranked just above it, on the figure the page is sorted by."""

    rank_above: int
    tied: bool = Field(description="not significantly different from the entry above (p ≥ 0.05)")
    test: PairedTestPublic


ER_HELP = (
    "effective robustness in the probit domain: Φ⁻¹(OOD accuracy) minus the fitted line at the "
    "entry's Φ⁻¹(ID accuracy), with a 95 % interval (binomial uncertainty of both accuracies and "
    "the line's standard error). Computed on read across the entries you can see; not stored "
    "and not a sort key"
)


class ERCellPublic(BaseModel):
    """An OOD entry's effective robustness on its benchmark aggregate (Fridovich-Keil et al.
    2022 §4): fitted per σ across the same-σ entries of this benchmark matched to the clean
    benchmark, ID accuracy = certified accuracy at r = 0 there. See ``/api/v1/analysis``."""

    value: float = Field(description=ER_HELP)
    low: float
    high: float
    sigma: float
    n: int = Field(description="entries in the fit (same σ, visible to you)")


class LeaderboardRowPublic(BaseModel):
    rank: int
    submission_id: int
    model_name: str
    owner: str
    authors: list[str]
    paper_url: str | None
    code_url: str | None
    architecture: str
    sigma: float
    extra_data: bool
    venue: str | None
    is_baseline: bool
    flagged: bool
    flag_reason: str | None
    submitted_at: datetime
    finished_at: datetime
    protocol_version: str
    metrics: Metrics
    effective_robustness: ERCellPublic | None = Field(
        default=None,
        description="ER on the benchmark aggregate for an OOD benchmark's entries (null on a "
        "clean benchmark, or with fewer than 3 matched entries at this σ); " + ER_HELP,
    )
    tied_with: int | None = Field(
        default=None,
        description=(
            "rank of the entry just above when this entry does not differ significantly from it "
            "in the sorted figure (paired test on the same images, p ≥ 0.05): shown as "
            '"tied with #k"; null when it differs, for the first entry, or for a sort key '
            "without paired tests (only mACR, certified accuracy and band means have them)"
        ),
    )
    tie: TiePublic | None = Field(default=None, description="the test behind `tied_with`")
    weights: WeightsLinkPublic | None = Field(
        default=None,
        description="model zoo: where to download the weights when the submitter published "
        "them under a licence; null otherwise",
    )


class LeaderboardPublic(BaseModel):
    benchmark: str
    protocol_version: str
    sort: str = Field(
        description="the sort key used: a label asked for (ACR, r = 0.5, any case) is answered "
        "with its key here"
    )
    sort_label: str = Field("", description="the label of the column sorted by (e.g. ACR)")
    order: Literal["asc", "desc"]
    total: int
    offset: int
    limit: int
    higher_is_better: dict[str, bool]
    rows: list[LeaderboardRowPublic]

    @classmethod
    def of(cls, page: LeaderboardPage) -> LeaderboardPublic:
        rows = []
        for row in page.rows:
            card = row.card
            weights = None
            if row.weights_license is not None:
                weights = WeightsLinkPublic(
                    license=row.weights_license,
                    url=WEIGHTS_URL.format(submission_id=row.submission_id),
                    manifest_url=MANIFEST_URL.format(submission_id=row.submission_id),
                    sha256=card["sha256"],
                    size_bytes=card["size_bytes"],
                )
            rows.append(
                LeaderboardRowPublic(
                    rank=row.rank,
                    submission_id=row.submission_id,
                    model_name=row.model_name,
                    owner=row.owner,
                    authors=list(card.get("authors") or []),
                    paper_url=card.get("paper_url"),
                    code_url=card.get("code_url"),
                    architecture=row.architecture,
                    sigma=row.sigma,
                    extra_data=row.extra_data,
                    venue=row.venue,
                    is_baseline=row.is_baseline,
                    flagged=row.flagged,
                    flag_reason=row.flag_reason,
                    submitted_at=row.submitted_at,
                    finished_at=row.finished_at,
                    protocol_version=row.protocol_version,
                    metrics=Metrics.of_figures(
                        row.figures, test_sets=row.test_sets, count=row.count, seconds=row.seconds
                    ),
                    weights=weights,
                )
            )
        return cls(
            benchmark=page.benchmark.name,
            protocol_version=page.query.protocol_version or page.benchmark.protocol_version,
            sort=page.query.sort,
            sort_label=page.sort_label,
            order=page.query.order,
            total=page.total,
            offset=page.query.offset,
            limit=page.query.limit,
            higher_is_better=HIGHER_IS_BETTER,
            rows=rows,
        )


class FacetsPublic(BaseModel):
    """Distinct filter values among the entries a viewer can see (for filter dropdowns)."""

    architectures: list[str]
    venues: list[str]
    sigmas: list[float]
