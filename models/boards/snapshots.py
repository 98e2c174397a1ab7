"""A board held in memory: every finished entry of a benchmark, sortable and filterable in
microseconds, valid for one value of the board counter (``models.db.board_version``).

A page used to cost three SQL statements that sort and count through the (benchmark, key, value)
index and join the filters (~15-30 ms of a request's CPU on 10,000 entries). A snapshot loads the
board's rows once (one ``select`` of the read model joined with the submissions' columns), keeps
the filter columns as numpy arrays and, per sort key and order, the board's order as an index
array built on first use; a page is then a boolean mask, an index into that order and a slice.
Each API process keeps its own snapshots and rebuilds one when the counter moved (one
primary-key read per request tells it).

What readers derive from the boards alone is kept the same way (:func:`derived`): the web page's
benchmark frame, the benchmark list, a compare page, each built once per counter value and key
(the key names the viewer class and the query).

Orders follow the SQL they replace: figures descending or ascending with unmeasured entries last,
ties by submission id ascending; names compare by code point (the same on SQLite and PostgreSQL,
where the SQL order followed the database's collation).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from certbench.denoising import denoiser_of
from models.boards import read_model as leaderboard_rows
from models.catalog.benchmarks import get_benchmark
from models.db import board_version
from models.db.entities import Benchmark, LeaderboardEntry, LeaderboardFigures, Submission, User
from models.db.roles import Role
from models.db.states import SubmissionState

__all__ = ["Board", "PageIds", "benchmark_named", "board", "derived", "forget", "viewer_key"]

#: Sort keys that are entry columns (the rest are figures of the read model).
COLUMN_SORTS = {
    "sigma": "sigma",
    "submitted": "submitted_at",
    "finished": "finished_at",
    "model_name": "model_name",
}

#: The columns a row of a page shows (``models.boards.leaderboard.LeaderboardRow`` but the rank).
_ROW_COLUMNS = (
    Submission.id.label("submission_id"),
    Submission.model_name,
    User.name.label("owner"),
    Submission.architecture,
    Submission.sigma,
    Submission.extra_data,
    Submission.venue,
    Submission.is_baseline,
    Submission.flagged,
    Submission.flag_reason,
    Submission.created_at.label("submitted_at"),
    LeaderboardEntry.finished_at,
    LeaderboardEntry.protocol_version,
    LeaderboardEntry.test_sets,
    LeaderboardEntry.count,
    LeaderboardEntry.seconds,
    LeaderboardFigures.figures,
    LeaderboardFigures.card,
    Submission.weights_license,
)
#: Columns only the index reads (visibility and the public download).
_INDEX_COLUMNS = (
    Submission.user_id,
    Submission.is_private,
    Submission.hidden,
    Submission.weights_public,
)


@dataclass(frozen=True)
class Filters:
    """What a page keeps of the board (``models.boards.leaderboard.LeaderboardQuery`` minus
    paging)."""

    protocol_version: str
    sigma: float | None = None
    architecture: str | None = None
    extra_data: bool | None = None
    venue: str | None = None
    search: str | None = None
    flagged: bool | None = None
    baseline: bool | None = None
    denoiser: str | None = None
    """Denoised smoothing entries: ``none`` (plain classifiers), ``any`` or a denoiser kind
    (``certbench.denoising.DENOISER_FILTERS``), read from the architecture's label."""


@dataclass(frozen=True)
class PageIds:
    """A page of a board: the rows (dicts shared with the snapshot: read, never change them),
    the filtered total and the snapshot's ``memo``."""

    rows: list[dict[str, Any]]
    total: int
    memo: dict[Any, Any]
    version: tuple[int | None, int]


@dataclass
class Board:
    """One benchmark's finished entries at one counter value."""

    version: tuple[int | None, int]
    """The board counter's (epoch, version) this snapshot was built at."""
    rows: list[dict[str, Any]]
    """Per entry, ascending by submission id: the page row's fields (``_ROW_COLUMNS``)."""
    user_id: np.ndarray
    public: np.ndarray
    protocol: np.ndarray
    sigma: np.ndarray
    architecture: np.ndarray
    venue: np.ndarray
    extra_data: np.ndarray
    flagged: np.ndarray
    baseline: np.ndarray
    names: list[str]
    owners: list[str]
    _orders: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    memo: dict[Any, Any] = field(default_factory=dict)
    """What readers derive from this snapshot and may reuse while it is current (the API's
    serialised rows and tie tests): it goes with the snapshot when the counter moves."""

    def __len__(self) -> int:
        return len(self.rows)

    def mask(self, filters: Filters, viewer: User | None) -> np.ndarray:
        """Which entries the page keeps, as ``viewer`` may see them (``visibility_filter``)."""
        keep = self.protocol == filters.protocol_version
        if viewer is None:
            keep &= self.public
        elif viewer.role != Role.ADMIN:
            keep &= self.public | (self.user_id == viewer.id)
        if filters.sigma is not None:
            keep &= np.abs(self.sigma - filters.sigma) < 1e-9
        if filters.architecture:
            keep &= self.architecture == filters.architecture
        if filters.venue:
            keep &= self.venue == filters.venue
        if filters.denoiser:
            kinds = self.memo.get("denoisers")
            if kinds is None:  # "diffusion · wrn" → diffusion, once per snapshot
                kinds = self.memo["denoisers"] = np.array(
                    [denoiser_of(str(label)) or "none" for label in self.architecture], dtype=object
                )
            keep &= (kinds != "none") if filters.denoiser == "any" else kinds == filters.denoiser
        for wanted, column in (
            (filters.extra_data, self.extra_data),
            (filters.flagged, self.flagged),
            (filters.baseline, self.baseline),
        ):
            if wanted is not None:
                keep &= column == wanted
        if filters.search:
            needle = filters.search.lower()
            keep &= np.fromiter(
                (needle in n or needle in o for n, o in zip(self.names, self.owners, strict=True)),
                dtype=bool,
                count=len(self.rows),
            )
        return keep

    def order(self, sort: str, order: Literal["asc", "desc"]) -> np.ndarray:
        """Positions of the whole board sorted by ``sort`` (built once per key and order)."""
        found = self._orders.get((sort, order))
        if found is None:
            found = self._orders[(sort, order)] = _sorted(self._sort_values(sort), order)
        return found

    def page(
        self,
        filters: Filters,
        viewer: User | None,
        *,
        sort: str,
        order: Literal["asc", "desc"],
        offset: int,
        limit: int,
    ) -> PageIds:
        """The page's rows in rank order and how many entries the filters keep."""
        kept = self.kept(filters, viewer, sort=sort, order=order)
        rows = [self.rows[i] for i in kept[offset : offset + limit]]
        return PageIds(rows=rows, total=len(kept), memo=self.memo, version=self.version)

    def kept(
        self, filters: Filters, viewer: User | None, *, sort: str, order: Literal["asc", "desc"]
    ) -> np.ndarray:
        """Positions of the entries the filters keep for ``viewer``, in rank order; the last
        :data:`KEPT_MEMO` distinct views are kept (browsing repeats a few views many times)."""
        key = ("kept", filters, viewer_key(viewer), sort, order)
        found = self.memo.get(key)
        if found is None:
            ranked = self.order(sort, order)
            found = ranked[self.mask(filters, viewer)[ranked]]
            views = self.memo.setdefault("views", [])
            views.append(key)
            if len(views) > KEPT_MEMO:
                self.memo.pop(views.pop(0), None)
            self.memo[key] = found
        return found

    def _sort_values(self, sort: str) -> np.ndarray:
        column = COLUMN_SORTS.get(sort)
        if column is not None:
            return np.array([row[column] for row in self.rows], dtype=object)
        return np.array([_number(row["figures"].get(sort)) for row in self.rows], dtype=np.float64)


KEPT_MEMO = 256
"""Distinct (filters, viewer, sort, order) views whose ranked positions a snapshot keeps."""


def viewer_key(viewer: User | None) -> tuple[Any, ...]:
    """What decides which entries a viewer sees
    (``models.submissions.queries.visibility_filter``): a cache of what a viewer is shown keys
    on it, so two viewers share an entry only when they see the same entries."""
    if viewer is None:
        return ("public",)
    return ("admin",) if viewer.role == Role.ADMIN else ("user", viewer.id)


def _number(value: Any) -> float:
    return np.nan if value is None else float(value)


def _sorted(values: np.ndarray, order: Literal["asc", "desc"]) -> np.ndarray:
    """Positions sorted by ``values`` (``order``), missing values (NaN, None) last, ties by
    position ascending (positions ascend with submission ids)."""
    positions = np.arange(len(values))
    if values.dtype == object:
        present = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
        codes = np.zeros(len(values), dtype=np.int64)
        if present.any():
            codes[present] = np.unique(values[present], return_inverse=True)[1]
        keys = codes.astype(np.float64)
    else:
        present = ~np.isnan(values)
        keys = values
    measured = positions[present]
    primary = -keys[measured] if order == "desc" else keys[measured]
    ranked = measured[np.lexsort((measured, primary))]
    return np.concatenate([ranked, positions[~present]])


_BOARDS: dict[tuple[str, int], Board] = {}
_LOCK = threading.Lock()


_BENCHMARKS: dict[tuple[str, str], tuple[tuple[int | None, int], Benchmark]] = {}


def benchmark_named(
    session: Session, name: str, version: tuple[int | None, int] | None = None
) -> tuple[Benchmark, tuple[int | None, int]]:
    """The benchmark called ``name`` and the board counter it was read at (``version`` when the
    caller read it already). Reused across requests while the counter stands (a definition
    change moves it): the object is loaded with its test sets in a session of its own and
    detached, so it is only ever read. Raises NotFoundError like
    ``models.catalog.benchmarks.get_benchmark``."""
    version = board_version.current(session) if version is None else version
    key = (str(session.get_bind().engine.url), name)
    found = _BENCHMARKS.get(key)
    if found is not None and found[0] == version:
        return found[1], version
    # Its own session: the caller's session may hold (and keep using) the same row's object.
    with Session(session.get_bind(), expire_on_commit=False) as own:
        benchmark = own.scalar(
            select(Benchmark)
            .options(selectinload(Benchmark.test_sets))
            .where(Benchmark.name == name)
        )
        if benchmark is None:  # unknown (NotFoundError naming close matches), or not committed
            return get_benchmark(session, name), version  # yet: the caller's own, not kept
        own.expunge_all()  # detached with its test sets loaded: nothing loads lazily later
    with _LOCK:
        if len(_BENCHMARKS) > 256:  # names that come and go (tests): keep the map bounded
            _BENCHMARKS.clear()
        _BENCHMARKS[key] = (version, benchmark)
    return benchmark, version


def board(
    session: Session, benchmark: Benchmark, version: tuple[int | None, int] | None = None
) -> Board:
    """The benchmark's board as of the committed counter this session sees (``version`` when
    the caller read it already), built when the counter moved since this process last built it."""
    version = board_version.current(session) if version is None else version
    key = (str(session.get_bind().engine.url), benchmark.id)
    found = _BOARDS.get(key)
    if found is not None and found.version == version:
        return found
    with _LOCK:  # one build per board at a time; others wait for it rather than repeat it
        found = _BOARDS.get(key)
        if found is None or found.version != version:
            found = _BOARDS[key] = _build(session, benchmark, version)
    return found


T = TypeVar("T")

_DERIVED: OrderedDict[tuple[str, Hashable], tuple[tuple[int | None, int], Any]] = OrderedDict()
DERIVED_SIZE = 256
"""Values :func:`derived` keeps (per process, least recently used dropped first)."""


def derived(
    session: Session,
    key: Hashable,
    build: Callable[[], T],
    version: tuple[int | None, int] | None = None,
    *,
    keep: Callable[[T], bool] | None = None,
) -> T:
    """``build()``, kept while the board counter stands: for what the service derives from the
    boards alone (a benchmark listing, a page's table), which a committed change of any board,
    entry, definition or owner's name moves (``models.db.board_version``).

    ``key`` names the value and everything else it depends on (the viewer's
    :func:`viewer_key`, the query): two requests share a value only when their keys are equal.
    The value is shared between threads and requests: callers read it, never change it.
    ``version`` is the counter when the caller read it before anything ``build`` reads (so what
    is kept under a version is never older than it); ``keep`` says whether a built value may be
    kept (e.g. not while it shows a run in flight, whose progress moves no counter).
    """
    version = board_version.current(session) if version is None else version
    full = (str(session.get_bind().engine.url), key)
    with _LOCK:
        found = _DERIVED.get(full)
        if found is not None and found[0] == version:
            _DERIVED.move_to_end(full)
            return found[1]  # type: ignore[no-any-return]
    value = build()  # outside the lock: a slow build holds up no other key
    if keep is not None and not keep(value):
        return value
    with _LOCK:
        _DERIVED[full] = (version, value)
        _DERIVED.move_to_end(full)
        while len(_DERIVED) > DERIVED_SIZE:
            _DERIVED.popitem(last=False)
    return value


def forget() -> None:
    """Drop every snapshot of this process (tests that recreate a database under one URL)."""
    with _LOCK:
        _BOARDS.clear()
        _BENCHMARKS.clear()
        _DERIVED.clear()


def _build(session: Session, benchmark: Benchmark, version: tuple[int | None, int]) -> Board:
    rows: list[dict[str, Any]] = []
    index: list[tuple[Any, ...]] = []
    for found in session.execute(
        select(*_ROW_COLUMNS, *_INDEX_COLUMNS)
        .select_from(LeaderboardEntry)
        .join(Submission, Submission.id == LeaderboardEntry.submission_id)
        .join(User, User.id == Submission.user_id)
        .outerjoin(LeaderboardFigures, LeaderboardFigures.submission_id == Submission.id)
        .where(
            LeaderboardEntry.benchmark_id == benchmark.id,
            Submission.state == SubmissionState.FINISHED,
        )
        .order_by(Submission.id)
    ).mappings():
        values = dict(found)
        user_id, private, hidden, published = (values.pop(c.key) for c in _INDEX_COLUMNS)
        if not published or private or hidden:  # ``models.submissions.zoo.publicly_downloadable``
            values["weights_license"] = None
        rows.append(values)
        index.append((user_id, not private and not hidden))
    _fill_missing_figures(session, rows)
    return Board(
        version=version,
        rows=rows,
        user_id=np.array([u for u, _ in index], dtype=np.int64),
        public=np.array([p for _, p in index], dtype=bool),
        protocol=_strings(rows, "protocol_version"),
        sigma=np.array([r["sigma"] for r in rows], dtype=np.float64),
        architecture=_strings(rows, "architecture"),
        venue=_strings(rows, "venue"),
        extra_data=np.array([bool(r["extra_data"]) for r in rows], dtype=bool),
        flagged=np.array([bool(r["flagged"]) for r in rows], dtype=bool),
        baseline=np.array([bool(r["is_baseline"]) for r in rows], dtype=bool),
        names=[r["model_name"].lower() for r in rows],
        owners=[r["owner"].lower() for r in rows],
    )


def _strings(rows: Sequence[dict[str, Any]], column: str) -> np.ndarray:
    return np.array([r[column] for r in rows], dtype=object)


def _fill_missing_figures(session: Session, rows: list[dict[str, Any]]) -> None:
    """Entries whose read-model row is missing get it built from their stored figures."""
    missing = {r["submission_id"]: r for r in rows if r["figures"] is None}
    if missing:
        for built in leaderboard_rows.build(session, list(missing)):
            missing[built["submission_id"]] |= {"figures": built["figures"], "card": built["card"]}
