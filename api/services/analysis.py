"""Effective robustness across the leaderboard, and which model metric explains OOD accuracy.

Computed on read from the stored results (``api.services.analysis_data``), never stored: a new
entry moves every fit, and each viewer's fit covers exactly the entries they may see. Per σ (fits
never mix noise levels) and per OOD set, the probit-domain line Φ⁻¹(OOD) = a + b·Φ⁻¹(ID) is fitted
across the matched entries and each entry's effective robustness is its distance above the line
(``certbench.lens.effective``; Fridovich-Keil et al. 2022 §4, after Miller et al. 2021
and Andreassen et al. 2021). Each metric's slope and R² as a predictor of probit OOD accuracy form
the paper's Tables 1–3: fitted per architecture and averaged over architectures as the paper does
(``certbench.lens.predictors``), with the pooled fit over every entry of the σ kept as a second,
labelled view (``SigmaGroup.pooled``).

- **ID accuracy** (``id_source``): ``smoothed`` — certified accuracy at r = 0 of the smoothed
  classifier on the clean benchmark (``cert_acc_000``); ``base`` — the base classifier's clean
  accuracy (``base_accuracy``, PD-robustness stage) where it was measured.
- **OOD accuracy**: certified accuracy at r = 0 of the same smoothed classifier on each OOD set:
  every test set, every band (its test sets' images pooled) and the benchmark aggregate (the
  leaderboard's r = 0 figure, the mean over test sets, counted over every certified image). The
  intervals treat images as independent trials; a band or aggregate reuses the same base images
  under several corruptions, so its intervals are optimistic.
- **Metrics**: the clean entry's Fourier-lens figures, used only when computed under the clean
  benchmark's current lens protocol (same fingerprint), so every point of a predictor fit is
  measured alike.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from sqlalchemy.orm import Session

from api.services.analysis_data import (
    LENS_KEYS,
    Family,
    Matched,
    StoredEntry,
    load_entries,
    match,
    resolve_family,
)
from certbench.errors import EffectiveRobustnessError
from certbench.lens import (
    ID_ACCURACY,
    Accuracy,
    ArchitectureFit,
    Entry,
    ERValue,
    LinearFit,
    PredictorFit,
    architectures,
    effective_robustness,
    metric_predictors,
    per_architecture_predictors,
)
from models.core.errors import NotFoundError
from models.db import board_version
from models.db.entities import Benchmark, Role, User

IdSource = Literal["smoothed", "base"]
Scope = Literal["aggregate", "band", "test_set"]
SCOPES: tuple[Scope, ...] = ("aggregate", "band", "test_set")
BANDS = ("low", "mid", "high")
LEVEL = 0.95


@dataclass(frozen=True)
class OODSet:
    """One OOD accuracy an analysis fits: a benchmark aggregate, a band or a test set.

    ``key`` is ``<benchmark>``, ``<benchmark>/band:<band>`` or ``<benchmark>/<test set>``.
    """

    key: str
    benchmark: str
    scope: Scope
    name: str
    test_sets: tuple[str, ...]


def ood_sets(benchmark: Benchmark, scopes: Iterable[Scope] = SCOPES) -> list[OODSet]:
    """The OOD sets of one benchmark, aggregate first, then bands, then test sets."""
    wanted, names = set(scopes), tuple(ts.name for ts in benchmark.test_sets)
    out = []
    if "aggregate" in wanted:
        out.append(OODSet(benchmark.name, benchmark.name, "aggregate", benchmark.name, names))
    if "band" in wanted:
        for band in BANDS:
            members = tuple(ts.name for ts in benchmark.test_sets if ts.band == band)
            if members:
                key = f"{benchmark.name}/band:{band}"
                out.append(OODSet(key, benchmark.name, "band", band, members))
    if "test_set" in wanted:
        out += [OODSet(f"{benchmark.name}/{n}", benchmark.name, "test_set", n, (n,)) for n in names]
    return out


def ood_accuracy(entry: StoredEntry, ood: OODSet) -> Accuracy | None:
    """The entry's certified accuracy at r = 0 on ``ood`` (None when a test set is missing)."""
    if ood.scope == "aggregate":
        return entry.aggregate
    parts = [entry.sets.get(name) for name in ood.test_sets]
    if any(p is None for p in parts):
        return None
    return Accuracy.pooled(p for p in parts if p is not None)


@dataclass(frozen=True)
class Point:
    """One entry on one OOD set: its ID and OOD accuracies and, where fitted, its ER."""

    submission_id: int
    id_submission_id: int
    model_name: str
    owner: str
    id_accuracy: Accuracy
    ood_accuracy: Accuracy
    er: ERValue | None


@dataclass(frozen=True)
class TrendResult:
    """The probit fit of one OOD set at one σ (None with a ``reason`` when it cannot be fitted)."""

    ood: OODSet
    fit: LinearFit | None
    reason: str
    points: list[Point]


@dataclass(frozen=True)
class SigmaGroup:
    """Everything fitted at one σ: the matched entries (certbench ``Entry`` named by the clean
    submission id), their trends and the predictor table rows per OOD set key."""

    sigma: float
    entries: list[Entry]
    matched: dict[str, Matched]
    unmatched: int
    trends: list[TrendResult] = field(default_factory=list)
    predictors: dict[str, list[ArchitectureFit]] = field(default_factory=dict)
    """The paper's view: per OOD set key, each metric fitted per architecture, m and R²
    averaged over architectures."""
    pooled: dict[str, list[PredictorFit]] = field(default_factory=dict)
    """Second view: one fit through every entry of the σ, whatever its architecture."""
    metrics: list[str] = field(default_factory=list)
    lens_excluded: int = 0

    @property
    def architectures(self) -> dict[str, int]:
        """Entries per architecture (the paper's groups)."""
        return architectures(self.entries)


@dataclass(frozen=True)
class Analysis:
    family: Family
    id_source: IdSource
    level: float
    sets: list[OODSet]
    groups: list[SigmaGroup]


def analyse(
    session: Session,
    name: str,
    *,
    viewer: User | None,
    id_source: IdSource = "smoothed",
    sigma: float | None = None,
    scopes: Sequence[Scope] = SCOPES,
    ood: Sequence[str] = (),
    level: float = LEVEL,
    id_benchmark: str | None = None,
    predictors: bool = True,
) -> Analysis:
    """Fits and ER of benchmark ``name``'s family as ``viewer`` sees it.

    ``ood`` restricts the OOD sets to these keys (NotFoundError names the valid ones); ``sigma``
    to one noise level. Raises NotFoundError for unknown benchmarks or families without a clean
    benchmark (see ``resolve_family``).
    """
    family = resolve_family(session, name, id_benchmark=id_benchmark)
    sets = [s for bench in family.oods for s in ood_sets(bench, scopes if not ood else SCOPES)]
    if ood:
        known = {s.key: s for s in sets}
        missing = [k for k in ood if k not in known]
        if missing:
            raise NotFoundError(
                f"unknown OOD set(s) {missing}; this analysis has e.g. {list(known)[:6]} "
                "(keys are <benchmark>, <benchmark>/band:<band> or <benchmark>/<test set>)"
            )
        sets = [known[k] for k in dict.fromkeys(ood)]
    detail = predictors or id_source == "base" or any(s.scope != "aggregate" for s in sets)
    clean = load_entries(session, family.clean, viewer=viewer, detail=detail)
    oods = {b.name: load_entries(session, b, viewer=viewer, detail=detail) for b in family.oods}
    matched, unmatched = match(clean, oods)
    lens_protocol = (family.clean.stages or {}).get("fourier_lens", {}).get("fingerprint")
    groups = []
    for value in sorted({m.clean.sigma for m in matched} | _sigmas(unmatched)):
        if sigma is not None and not math.isclose(value, sigma, abs_tol=1e-9):
            continue
        here = [m for m in matched if m.clean.sigma == value]
        lost = sum(e.sigma == value for entries in unmatched.values() for e in entries)
        group = _group(value, here, lost, sets, id_source, lens_protocol)
        _fit(group, sets, level, predictors)
        groups.append(group)
    return Analysis(family, id_source, level, sets, groups)


def _sigmas(unmatched: dict[str, list[StoredEntry]]) -> set[float]:
    return {e.sigma for entries in unmatched.values() for e in entries}


def _group(
    sigma: float,
    matched: list[Matched],
    unmatched: int,
    sets: Sequence[OODSet],
    id_source: IdSource,
    lens_protocol: str | None,
) -> SigmaGroup:
    """certbench entries of one σ: ID accuracy, every OOD set's accuracy, current lens figures."""
    entries, by_name, excluded = [], {}, 0
    for m in matched:
        id_accuracy = m.clean.aggregate if id_source == "smoothed" else m.clean.base
        if id_accuracy is None:
            continue
        ood = {}
        for s in sets:
            partner = m.partners.get(s.benchmark)
            accuracy = None if partner is None else ood_accuracy(partner, s)
            if accuracy is not None:
                ood[s.key] = accuracy
        if not ood:
            continue
        current = lens_protocol is not None and m.clean.lens_fingerprint == lens_protocol
        excluded += bool(m.clean.lens) and not current
        name = str(m.clean.submission_id)
        lens = dict(m.clean.lens) if current else {}
        entries.append(Entry(name, sigma, id_accuracy, ood, lens, m.clean.architecture))
        by_name[name] = m
    present = {k for e in entries for k in e.metrics}
    metrics = [ID_ACCURACY, *(k for k in LENS_KEYS if k in present)]
    return SigmaGroup(sigma, entries, by_name, unmatched, metrics=metrics, lens_excluded=excluded)


def _fit(group: SigmaGroup, sets: Sequence[OODSet], level: float, predictors: bool) -> None:
    for s in sets:
        rows = [e for e in group.entries if s.key in e.ood]
        fit, reason, values = None, "", {}
        try:
            trend = effective_robustness(rows, s.key, level)
            fit, values = trend.fit, {v.name: v for v in trend.entries}
        except EffectiveRobustnessError as err:
            reason = str(err)
        points = [_point(group.matched[e.name], s, e, values.get(e.name)) for e in rows]
        points.sort(key=lambda p: -p.er.value if p.er else -p.id_accuracy.value)
        group.trends.append(TrendResult(s, fit, reason, points))
        if predictors and rows:
            group.predictors[s.key] = per_architecture_predictors(rows, s.key, group.metrics)
            group.pooled[s.key] = metric_predictors(rows, s.key, group.metrics)


def _point(m: Matched, s: OODSet, entry: Entry, er: ERValue | None) -> Point:
    partner = m.partners[s.benchmark]
    return Point(
        submission_id=partner.submission_id,
        id_submission_id=m.clean.submission_id,
        model_name=partner.model_name,
        owner=partner.owner,
        id_accuracy=entry.id_accuracy,
        ood_accuracy=entry.ood[s.key],
        er=er,
    )


@dataclass(frozen=True)
class ERCell:
    """An OOD entry's effective robustness on its benchmark aggregate (a leaderboard cell)."""

    value: float
    low: float
    high: float
    sigma: float
    n: int


def aggregate_er(
    session: Session,
    name: str,
    *,
    viewer: User | None,
    version: tuple[int | None, int] | None = None,
) -> dict[int, ERCell]:
    """OOD submission id → ER on benchmark ``name``'s aggregate, fitted per σ over the entries
    ``viewer`` sees; empty for a clean benchmark or a family without one (no ER is defined).

    Every leaderboard page shows this column, and refitting a 10,000-entry board costs seconds,
    so results are memoised per process under the board counter (``models.db.board_version``) and
    what the viewer may see: any new, re-run or moderated entry moves the counter and the next
    read refits.
    """
    key = (name, _viewer_key(viewer), _board_key(session, version))
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return dict(_CACHE[key])
    try:
        family = resolve_family(session, name)
    except NotFoundError:
        family = None
    no_er = family is None or family.clean.name == name  # a clean benchmark: memoised empty
    cells = {} if no_er else _aggregate_cells(session, name, viewer)
    with _CACHE_LOCK:
        _CACHE[key] = cells
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    return dict(cells)


def _aggregate_cells(session: Session, name: str, viewer: User | None) -> dict[int, ERCell]:
    analysis = analyse(session, name, viewer=viewer, scopes=("aggregate",), predictors=False)
    out = {}
    for group in analysis.groups:
        for trend in group.trends:
            if trend.fit is None:
                continue
            n = trend.fit.n
            for p in trend.points:
                if p.er is not None:
                    out[p.submission_id] = ERCell(p.er.value, p.er.low, p.er.high, group.sigma, n)
    return out


CACHE_SIZE = 64
_CACHE: OrderedDict[tuple[object, ...], dict[int, ERCell]] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def clear_cache() -> None:
    """Forget every memoised ER column (tests and benchmarks)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def _viewer_key(viewer: User | None) -> tuple[object, ...]:
    """What decides which entries a viewer sees (``visibility_filter``)."""
    if viewer is None:
        return ("public",)
    return ("admin",) if viewer.role == Role.ADMIN else ("user", viewer.id)


def _board_key(
    session: Session, version: tuple[int | None, int] | None = None
) -> tuple[object, ...]:
    """The database and its board counter (``models.db.board_version``; ``version`` when the
    caller read it already), which moves with every committed change of an entry, its figures
    or moderation, or of a definition."""
    version = board_version.current(session) if version is None else version
    return (str(session.get_bind().engine.url), *version)
