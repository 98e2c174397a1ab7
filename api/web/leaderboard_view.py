"""Leaderboard table model: which columns a benchmark shows, sort links, filters and paging.

The page itself is server-rendered from ``api.services.leaderboards.leaderboard`` (one indexed
query per page); this module only turns the request's query string into a ``LeaderboardQuery``
and describes the columns, so the same table works without JavaScript.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from urllib.parse import urlencode

from api.schemas import BenchmarkPublic
from models.leaderboard import HIGHER_IS_BETTER, SORT_COLUMNS, LeaderboardQuery

PAGE_SIZES = (25, 50, 100, 200)
DEFAULT_PAGE_SIZE = 50


@dataclass(frozen=True)
class Column:
    """A metric column: ``key`` is the sort key (a ``SORT_COLUMNS`` name), ``kind`` its format."""

    key: str
    header: str
    help: str
    kind: str = "percent"  # percent | radius | probability
    group: str = "certified"  # certified (smoothed model) | robustness (base classifier)

    @property
    def higher_is_better(self) -> bool:
        return HIGHER_IS_BETTER[self.key]


def metric_columns(benchmark: BenchmarkPublic) -> list[Column]:
    """Every metric column of the leaderboard: the smoothed model's, then the base classifier's
    robustness when the benchmark has that stage."""
    return certified_columns(benchmark) + robustness_columns(benchmark)


def certified_columns(benchmark: BenchmarkPublic) -> list[Column]:
    """Columns in reading order: ACR with the p_A summary beside it (seed 001), then certified
    accuracy on the radius grid, abstain rate, and band means when the benchmark has bands."""
    many = len(benchmark.test_sets) > 1
    columns = [
        Column(
            "macr",
            "mACR" if many else "ACR",
            "average certified radius (ℓ2, [0,1] pixels)"
            + (", mean over test sets" if many else ""),
            "radius",
        ),
        Column(
            "pa_median",
            "p_A median",
            "median over images of p̂_A = n_y/n, the base model's accuracy under noise (seed 001)",
            "probability",
        ),
        Column("cert_acc_000", "r = 0", "certified accuracy at radius 0 (clean, smoothed)"),
        Column("cert_acc_025", "r = 0.25", "certified accuracy at ℓ2 radius 0.25"),
        Column("cert_acc_050", "r = 0.5", "certified accuracy at ℓ2 radius 0.5"),
        Column("cert_acc_075", "r = 0.75", "certified accuracy at ℓ2 radius 0.75"),
        Column("cert_acc_100", "r = 1.0", "certified accuracy at ℓ2 radius 1.0"),
        Column("abstain_rate", "abstain", "fraction of images the smoothed model abstains on"),
    ]
    for band in ("low", "mid", "high"):
        if band in benchmark.bands:
            columns.append(
                Column(
                    f"band_{band}",
                    f"{band} band",
                    f"mean ACR over the {band}-frequency corruptions (seed 000 bands)",
                    "radius",
                )
            )
    return columns


#: Leaderboard columns of the robustness stage, per ε (units of 1/255).
ROBUSTNESS_EPS = (8, 16)


def robustness_columns(benchmark: BenchmarkPublic) -> list[Column]:
    """The base classifier's clean accuracy and its ℓ∞ and ℓ∞ ∩ PD robust accuracy at each ε the
    benchmark attacks (seed 004); none for a benchmark without the robustness stage."""
    protocol = benchmark.robustness
    if protocol is None:
        return []
    base = "base classifier (deterministic model, not smoothed)"
    columns = [
        Column(
            "base_accuracy",
            "clean (base)",
            f"clean accuracy of the {base} on the clean subset",
            group="robustness",
        )
    ]
    for eps in ROBUSTNESS_EPS:
        if eps not in protocol.get("eps", ROBUSTNESS_EPS):
            continue
        columns += [
            Column(
                f"linf_acc_{eps}",
                f"ℓ∞ {eps}/255",
                f"robust accuracy of the {base} under ℓ∞ APGD at ε = {eps}/255",
                group="robustness",
            ),
            Column(
                f"pd_acc_{eps}",
                f"ℓ∞∩PD {eps}/255",
                f"robust accuracy of the {base} under ℓ∞ ∩ PD at ε = {eps}/255: the worse of ℓ∞ "
                "APGD + lazy PD projection and PD-aware APGD (seed 004)",
                group="robustness",
            ),
        ]
    return columns


@dataclass(frozen=True)
class Filters:
    """The leaderboard request as the page sees it (1-based page numbers)."""

    sort: str = "macr"
    order: str = "desc"
    page: int = 1
    per_page: int = DEFAULT_PAGE_SIZE
    search: str = ""
    sigma: float | None = None
    architecture: str = ""
    extra_data: str = ""  # "", "yes", "no"
    venue: str = ""
    baseline: str = ""  # "", "only", "exclude"
    flagged: str = ""  # "", "only", "exclude"

    def query(self) -> LeaderboardQuery:
        return LeaderboardQuery(
            sort=self.sort,
            order="asc" if self.order == "asc" else "desc",
            offset=(self.page - 1) * self.per_page,
            limit=self.per_page,
            sigma=self.sigma,
            architecture=self.architecture or None,
            extra_data={"yes": True, "no": False}.get(self.extra_data),
            venue=self.venue or None,
            search=self.search or None,
            baseline={"only": True, "exclude": False}.get(self.baseline),
            flagged={"only": True, "exclude": False}.get(self.flagged),
        )

    def params(self, **changes: object) -> str:
        """Query string of this view with ``changes`` applied (defaults left out)."""
        view = replace(self, **changes)  # type: ignore[arg-type]
        default = Filters()
        items = {
            name: getattr(view, name)
            for name in self.__dataclass_fields__
            if getattr(view, name) != getattr(default, name)
        }
        return urlencode({k: ("" if v is None else v) for k, v in items.items()})

    def sort_link(self, key: str) -> str:
        """Clicking a header sorts by it (best first); clicking again flips the order."""
        if key == self.sort:
            order = "asc" if self.order == "desc" else "desc"
        else:
            order = "desc" if HIGHER_IS_BETTER.get(key, True) else "asc"
        return self.params(sort=key, order=order, page=1)

    def aria_sort(self, key: str) -> str:
        if key != self.sort:
            return "none"
        return "ascending" if self.order == "asc" else "descending"

    @property
    def active(self) -> bool:
        return any(
            (self.search, self.sigma, self.architecture, self.extra_data, self.venue,
             self.baseline, self.flagged)
        )  # fmt: skip


def valid_sort(key: str) -> bool:
    return key in SORT_COLUMNS


@dataclass(frozen=True)
class Pager:
    page: int
    pages: int
    total: int
    first: int
    last: int

    @classmethod
    def of(cls, *, total: int, page: int, per_page: int) -> Pager:
        pages = max(1, -(-total // per_page))
        first = 0 if total == 0 else (page - 1) * per_page + 1
        return cls(page, pages, total, first, min(total, page * per_page))

    def window(self, radius: int = 2) -> list[int]:
        """Page numbers to link: first, last and a few around the current page."""
        numbers = {1, self.pages, *range(self.page - radius, self.page + radius + 1)}
        return sorted(n for n in numbers if 1 <= n <= self.pages)
