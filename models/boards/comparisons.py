"""Paired comparisons of leaderboard entries, from their stored per-image data: the tests of
``GET /api/v1/leaderboards/{benchmark}/compare`` and the leaderboard's "tied with #k" marks.

Two entries of one benchmark were certified on the same images, so they are compared image by
image (``certbench.stats.intervals``): a paired bootstrap over the shared source images for
ACR/mACR,
a band's mean ACR, and certified accuracy averaged over several test sets; exact McNemar for
certified accuracy on a benchmark of one test set. The paired bootstraps read each entry's image
terms (one small file, ``certification_intervals.TERMS_UNIT``), or, for an entry aggregated
before they existed, its records (slower; cached per process by file version).

The other stages' figures (``Stage.paired_keys``: robustness, weather, Fourier sensitivity and
lens figures) are compared from the per-image terms each stage stores beside its records
(``models.boards.uncertainty``): exact McNemar for an accuracy of one set of images, the paired
bootstrap for means (``certbench.stats.terms``). Their keys are the leaderboard's own.

"Tied with #k": the entry ranked just above does not differ significantly (two-sided p ≥ 0.05)
in the figure the page is sorted by; each adjacent pair is one test (no multiplicity
correction), as ``certbench.stats.intervals.tied_with_above`` defines it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.orm import Session

from models.boards import uncertainty as stage_uncertainty
from models.core.settings import Settings
from models.db.entities import Benchmark, StageResult, Submission
from models.stages import registry
from models.stages.base import Stage
from models.stages.certification.intervals import TERMS_UNIT, terms_sets
from models.stages.certification.keys import BANDS, RADIUS_KEYS
from models.submissions import storage

if TYPE_CHECKING:
    import pyarrow as pa

    from certbench.stats import FigureTerms, ImageTerms, PairedTest

ALPHA_TIE = 0.05
#: Leaderboard sort keys whose ranks carry tie marks → the figure's image-terms key.
TIE_KEYS: dict[str, str] = {
    "macr": "acr",
    **{key: f"certified@{radius:g}" for radius, key in RADIUS_KEYS.items()},
    **{f"band_{band}": f"acr:{band}" for band in BANDS},
    "clean_accuracy": "clean",
    "abstain_rate": "abstain",
}
#: Image-terms keys of certification's 0/1 figures (exact McNemar on one test set).
PROPORTIONS = {"clean": "correct", "abstain": "abstain"}


def stage_of(key: str) -> Stage | None:
    """The stage that stores per-image terms of the figure ``key`` (None: none does)."""
    for stage in registry.all_stages():
        if key in stage.paired_keys():
            return stage
    return None


def _certification_key(key: str) -> bool:
    return key == "acr" or key in PROPORTIONS or key.startswith(("acr:", "certified@"))


def terms_key(sort: str) -> str | None:
    """The image-terms key of a sort key, None for a figure without paired tests: the
    certification terms' own names, the leaderboard key for any other stage's figure."""
    if sort in TIE_KEYS:
        return TIE_KEYS[sort]
    return sort if stage_of(sort) is not None else None


def metric_name(key: str) -> str:
    """A terms key as the leaderboard names the figure (``macr``, ``cert_acc_050``,
    ``band_low``; ``certified_accuracy@0.3`` off the leaderboard's radius grid; another stage's
    key unchanged)."""
    if not _certification_key(key):
        return key
    if key == "acr":
        return "macr"
    if key in PROPORTIONS:
        return {"clean": "clean_accuracy", "abstain": "abstain_rate"}[key]
    if key.startswith("acr:"):
        return f"band_{key[4:]}"
    radius = float(key.removeprefix("certified@"))
    return RADIUS_KEYS.get(radius, f"certified_accuracy@{radius:g}")


@dataclass(frozen=True)
class Entry:
    """What a paired test needs of one finished entry: its test sets' records (name → path and
    band) and its image-terms file (None when absent)."""

    submission_id: int
    records: dict[str, str]
    bands: dict[str, str | None]
    terms_path: str | None
    stage_terms: dict[str, str] = field(default_factory=dict)
    """Stage name → its per-image terms file, for the stages that stored one."""


def entries(
    session: Session, submissions: Sequence[Submission], *, settings: Settings
) -> dict[int, Entry]:
    """The stored per-image data of the submissions' certification, by submission id."""
    by_benchmark: dict[int, tuple[Benchmark, list[int]]] = {}
    for submission in submissions:
        by_benchmark.setdefault(submission.benchmark_id, (submission.benchmark, []))[1].append(
            submission.id
        )
    out: dict[int, Entry] = {}
    for benchmark, ids in by_benchmark.values():
        out |= entries_on(session, benchmark, ids, settings=settings)
    return out


def entries_on(
    session: Session,
    benchmark: Benchmark,
    ids: Sequence[int],
    *,
    settings: Settings,
    stages: Iterable[str] | None = None,
) -> dict[int, Entry]:
    """The stored per-image data of entries of one benchmark, by submission id (one query for
    all of them: a leaderboard page asks for 50 at once, by id, without loading submissions).

    ``stages``: the stages whose terms files to look for (default every stage); a leaderboard
    page's tie marks need only the sorted figure's, and each is a file lookup per entry.
    """
    rows = session.execute(
        select(StageResult.submission_id, StageResult.unit, StageResult.records_path).where(
            StageResult.submission_id.in_(ids), StageResult.stage == "certification"
        )
    ).all()
    records: dict[int, dict[str, str]] = {i: {} for i in ids}
    for submission_id, unit, relpath in rows:
        records[submission_id][unit] = str(storage.resolve(settings.artifacts_dir, relpath))
    band_of = {ts.name: ts.band for ts in benchmark.test_sets}
    # Paths this module builds from ids (no stored path): under the resolved root, no realpath.
    root = settings.artifacts_dir.resolve()
    wanted = [
        stage
        for stage in registry.all_stages()
        if stage.paired_keys() and (stages is None or stage.name in stages)
    ]
    out = {}
    for submission_id in ids:
        terms = root / storage.test_set_records_relpath(submission_id, TERMS_UNIT)
        out[submission_id] = Entry(
            submission_id=submission_id,
            records=records[submission_id],
            bands={name: band_of.get(name) for name in records[submission_id]},
            terms_path=str(terms) if terms.is_file() else None,
            stage_terms=_stage_terms(submission_id, root, wanted),
        )
    return out


def _stage_terms(submission_id: int, root: Path, stages: Sequence[Stage]) -> dict[str, str]:
    """The terms files of an entry's stages beyond certification that are on this server."""
    out = {}
    for stage in stages:
        path = root / stage_uncertainty.terms_relpath(stage, submission_id)
        if path.is_file():
            out[stage.name] = str(path)
    return out


def entry(session: Session, submission: Submission, *, settings: Settings) -> Entry:
    """The stored per-image data of one submission's certification."""
    return entries(session, [submission], settings=settings)[submission.id]


def _version(path: str) -> tuple[str, int, int]:
    stat = os.stat(path)
    return path, stat.st_mtime_ns, stat.st_size


@lru_cache(maxsize=64)
def _table(version: tuple[str, int, int]) -> pa.Table:
    from certbench.smoothing import read_table

    return read_table(version[0])


def _tables(data: Entry) -> dict[str, pa.Table] | None:
    """The entry's records tables, None when a file is missing on this server (or the entry
    has no certification records at all: nothing to pair)."""
    if not data.records:
        return None
    try:
        return {name: _table(_version(path)) for name, path in data.records.items()}
    except FileNotFoundError:
        return None


@lru_cache(maxsize=1024)
def _terms_file(version: tuple[str, int, int]) -> ImageTerms:
    from certbench.stats import ImageTerms

    table = _table(version)
    return ImageTerms.from_table(table, terms_sets(table))


@lru_cache(maxsize=256)
def _terms_from_records(
    versions: tuple[tuple[str, int, int], ...],
    names: tuple[str, ...],
    bands: tuple[str | None, ...],
) -> ImageTerms:
    from certbench.stats import image_terms
    from models.stages.certification.intervals import band_groups

    tables = {name: _table(v) for name, v in zip(names, versions, strict=True)}
    groups = band_groups(dict(zip(names, bands, strict=True)))
    return image_terms(tables, groups=groups)


def image_terms_of(data: Entry) -> ImageTerms | None:
    """The entry's image terms: its terms file, else computed from its records (None when
    records are missing or its test sets do not share their images)."""
    from certbench.errors import RecordsError

    try:
        if data.terms_path is not None:
            return _terms_file(_version(data.terms_path))
        names = tuple(sorted(data.records))
        versions = tuple(_version(data.records[name]) for name in names)
        return _terms_from_records(versions, names, tuple(data.bands[n] for n in names))
    except (FileNotFoundError, RecordsError):
        return None


@lru_cache(maxsize=1024)
def _figure_terms_file(version: tuple[str, int, int]) -> dict[str, FigureTerms]:
    from certbench.stats import terms_from_table

    return terms_from_table(_table(version))


def figure_terms_of(data: Entry, stage: str) -> dict[str, FigureTerms]:
    """An entry's stored terms of one stage's figures (empty when the file is not here)."""
    path = data.stage_terms.get(stage)
    if path is None:
        return {}
    try:
        return _figure_terms_file(_version(path))
    except FileNotFoundError:
        return {}


def _stage_paired_test(a: Entry, b: Entry, key: str) -> PairedTest | None:
    """A − B on another stage's figure ``key`` from both entries' terms files."""
    from certbench.stats import compare_figure

    stage = stage_of(key)
    if stage is None:
        return None
    ta, tb = figure_terms_of(a, stage.name).get(key), figure_terms_of(b, stage.name).get(key)
    if ta is None or tb is None:
        return None
    return compare_figure(ta, tb, key)


def paired_test(a: Entry, b: Entry, key: str) -> PairedTest | None:
    """A − B on the figure ``key`` (an image-terms key); None when the per-image data is not on
    this server. Raises RecordsError when the entries were measured on different images."""
    from certbench.stats import compare_terms

    if not _certification_key(key):
        return _stage_paired_test(a, b, key)
    from certbench.stats import compare_acr, compare_certified_accuracy

    one_set = len(a.records) == 1 and len(b.records) == 1
    if not (one_set and (key.startswith("certified@") or key in PROPORTIONS)):
        ta, tb = image_terms_of(a), image_terms_of(b)
        if ta is not None and tb is not None and key in ta.terms and key in tb.terms:
            return compare_terms(ta, tb, key)
    ra, rb = _tables(a), _tables(b)
    if ra is None or rb is None:
        return None
    if key in PROPORTIONS:
        return _proportion_test(ra, rb, key)
    if key.startswith("acr:"):
        band = key[4:]
        ra = {n: t for n, t in ra.items() if a.bands.get(n) == band}
        rb = {n: t for n, t in rb.items() if b.bands.get(n) == band}
        if not ra or not rb:
            return None
    if key.startswith("certified@"):
        radius = float(key.removeprefix("certified@"))
        if one_set:
            return compare_certified_accuracy(
                next(iter(ra.values())), next(iter(rb.values())), radius
            )
        return compare_certified_accuracy(ra, rb, radius)
    return compare_acr(ra, rb)


def _proportion_test(
    ra: dict[str, pa.Table], rb: dict[str, pa.Table], key: str
) -> PairedTest | None:
    """Clean accuracy or abstain rate from the records: exact McNemar on one test set, else the
    paired bootstrap of the per-image means over the shared test sets (terms from records, for
    an entry whose terms file predates these figures)."""
    import numpy as np

    from certbench.errors import RecordsError
    from certbench.stats import LEVEL, compare_terms, image_terms, mcnemar, set_arrays

    if len(ra) > 1 or len(rb) > 1:
        return compare_terms(image_terms(ra), image_terms(rb), key)
    sa, sb = set_arrays(next(iter(ra.values()))), set_arrays(next(iter(rb.values())))
    if not np.array_equal(sa.index, sb.index):
        raise RecordsError(
            "the entries were certified on different images; a paired test needs the same "
            "image indices in both"
        )
    field_name = PROPORTIONS[key]
    return mcnemar(getattr(sa, field_name), getattr(sb, field_name), metric_name(key), LEVEL)


@dataclass(frozen=True)
class TieMark:
    """How an entry stands against the entry ranked just above it."""

    rank_above: int
    test: PairedTest
    tied: bool


def tie_marks(
    ranked: Sequence[tuple[int, Entry]],
    above: tuple[int, Entry] | None,
    sort: str,
    *,
    alpha: float = ALPHA_TIE,
) -> dict[int, TieMark]:
    """Submission id → its mark against the entry ranked just above (``above`` is the entry
    before the page's first row, if any). Entries without per-image data get none."""
    from certbench.errors import RecordsError

    key = terms_key(sort)
    if key is None:
        return {}
    chain = ([above] if above is not None else []) + list(ranked)
    marks = {}
    for (rank_above, upper), (_, lower) in pairwise(chain):
        try:
            test = paired_test(upper, lower, key)
        except RecordsError:
            continue
        if test is not None:
            marks[lower.submission_id] = TieMark(rank_above, test, not test.significant(alpha))
    return marks


def comparison_keys(data: Sequence[Entry], radii: Sequence[float]) -> list[str]:
    """The figures a comparison of these entries tests: mACR, certified accuracy at each
    radius, clean accuracy and abstain rate, and each band all of them have; then every other
    stage's figure whose per-image terms all of them stored, in the stage's column order."""
    keys = ["acr", *(f"certified@{r:g}" for r in radii), *PROPORTIONS]
    shared_bands = set.intersection(*({b for b in d.bands.values() if b} for d in data))
    keys += [f"acr:{band}" for band in BANDS if band in shared_bands]
    for stage in registry.all_stages():
        if not stage.paired_keys():
            continue
        stored = [set(figure_terms_of(d, stage.name)) for d in data]
        common = set.intersection(*stored) if stored else set()
        keys += [spec.key for spec in stage.all_metric_specs() if spec.key in common]
    return keys
