"""Leaderboard table model: which columns a benchmark shows, sort links, filters and paging.

The page itself is server-rendered from ``api.services.leaderboard_page.leaderboard`` (one indexed
query per page); this module only turns the request's query string into a ``LeaderboardQuery``
and describes the columns, so the same table works without JavaScript.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from urllib.parse import urlencode

from api.schemas.benchmark import BenchmarkPublic
from models.boards.leaderboard import HIGHER_IS_BETTER, SUBMISSION_SORTS, LeaderboardQuery
from models.stages import registry
from models.stages.base import Stage

PAGE_SIZES = (25, 50, 100, 200)
DEFAULT_PAGE_SIZE = 50


@dataclass(frozen=True)
class Column:
    """A metric column: ``key`` is the sort key and the REST field of the rows' ``metrics``,
    ``header`` the label the page shows (and names in "sorted by ..."), ``kind`` its format."""

    key: str
    header: str
    help: str
    kind: str = "percent"  # percent | radius | probability | number
    group: str = "certified"  # certified (smoothed model) | robustness (base classifier) | ...
    stage: str = "certification"
    stage_title: str = ""

    def not_measured(self, submission_id: int) -> str:
        """Why an entry has no value here and how an operator measures it (the documented
        upgrade path leaves entries finished before a stage was added without its figures)."""
        return (
            f"not measured: this entry finished before the benchmark gained the "
            f"{self.stage_title or self.stage} stage (or did not finish it); an operator "
            f"measures it by re-running the entry: POST /api/v1/admin/submissions/"
            f"{submission_id}/rerun"
        )

    @property
    def higher_is_better(self) -> bool:
        return HIGHER_IS_BETTER[self.key]


def metric_columns(benchmark: BenchmarkPublic) -> list[Column]:
    """Every metric column of the leaderboard, stage by stage in registry order (the smoothed
    model's first, then e.g. the base classifier's robustness when the benchmark has that
    stage); each stage says which of its figures are columns for this benchmark."""
    columns = []
    for stage in registry.all_stages():
        columns += stage_columns(benchmark, stage)
    return columns


def certified_columns(benchmark: BenchmarkPublic) -> list[Column]:
    """The certification stage's columns: ACR with the p_A summary beside it (Sun et al.,
    ICML 2025), then certified accuracy on the radius grid, abstain rate, and band means."""
    return stage_columns(benchmark, registry.get("certification"))


def stage_columns(benchmark: BenchmarkPublic, stage: Stage) -> list[Column]:
    """A stage's columns for this benchmark; none when the benchmark does not run it."""
    protocol = benchmark.stages.get(stage.name)
    if stage.protocol_model is not None and protocol is None:
        return []
    specs = stage.metric_specs(
        protocol, test_sets=len(benchmark.test_sets), bands=list(benchmark.bands)
    )
    return [
        Column(spec.key, spec.label, spec.help, spec.kind, spec.group, stage.name, stage.title)
        for spec in specs
        if spec.column
    ]


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
    denoiser: str = ""  # "", "none", "any", "diffusion", "dncnn"

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
            denoiser=self.denoiser or None,
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

    def order_note(self) -> str:
        """How the rows run, in words: best/worst first for a figure, else by the column."""
        descending = self.order == "desc"
        if self.sort in SUBMISSION_SORTS:
            words = {
                "sigma": ("largest σ first", "smallest σ first"),
                "submitted": ("newest first", "oldest first"),
                "finished": ("newest first", "oldest first"),
                "model_name": ("Z to A", "A to Z"),
            }[self.sort]
            return words[0] if descending else words[1]
        best = descending == HIGHER_IS_BETTER.get(self.sort, True)
        return "best first" if best else "worst first"

    def aria_sort(self, key: str) -> str:
        if key != self.sort:
            return "none"
        return "ascending" if self.order == "asc" else "descending"

    @property
    def active(self) -> bool:
        return any(
            (self.search, self.sigma, self.architecture, self.extra_data, self.venue,
             self.baseline, self.flagged, self.denoiser)
        )  # fmt: skip


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
