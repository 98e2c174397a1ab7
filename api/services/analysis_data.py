"""What an effective-robustness analysis reads: a benchmark family's visible finished entries,
their accuracies as counts, their Fourier-lens figures, and which entries are the same model.

Everything comes from stored rows (``leaderboard_entries``, ``metric_values``, ``stage_results``);
nothing is stored back. **Family**: the benchmarks sharing a ``base_dataset``; its ID (clean)
benchmark is the one named like the base dataset (``cifar10`` for CIFAR-10-C, -C̄ and -F), or
the one a caller names. **Matching**: an entry of the clean benchmark and an entry of an OOD
benchmark are the same classifier when they have the same weights (the artifact's SHA-256), the
same model part of the manifest (architecture and its kwargs, number of classes, preprocessing,
input size; not the benchmark name or the metadata) and the same σ. Where several visible entries
of one benchmark match, the earliest submission stands for the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from certbench.lens import Accuracy
from models.catalog.benchmarks import get_benchmark, list_benchmarks
from models.core.errors import IntakeError, NotFoundError
from models.db.entities import (
    Artifact,
    Benchmark,
    LeaderboardEntry,
    MetricValue,
    StageResult,
    Submission,
    User,
)
from models.db.states import SubmissionState
from models.stages.fourier_lens.stage import METRICS, SMOOTHED_SUFFIX
from models.submissions.queries import visibility_filter

#: The manifest fields that make a classifier (the rest names the benchmark and the authors).
MODEL_FIELDS = ("architecture", "num_classes", "preprocessing", "input_size")
#: Lens figures used as predictors, in the paper's order, then the smoothed classifier's.
LENS_KEYS = (*METRICS, *(f"{k}{SMOOTHED_SUFFIX}" for k, v in METRICS.items() if v != "jacobian"))
ID_METRIC = "cert_acc_000"
#: Submission ids per IN (...) query (well under SQLite's and PostgreSQL's parameter limits).
CHUNK = 900
BASE_METRIC = "base_accuracy"


@dataclass(frozen=True)
class Family:
    """The ID (clean) benchmark and the OOD benchmarks an analysis covers."""

    clean: Benchmark
    oods: tuple[Benchmark, ...]


def resolve_family(session: Session, name: str, *, id_benchmark: str | None = None) -> Family:
    """The family of benchmark ``name``: an OOD benchmark is analysed alone, the clean one
    with every other benchmark of its base dataset.

    Raises NotFoundError for an unknown benchmark or a family without a clean benchmark, and
    IntakeError when ``id_benchmark`` belongs to another base dataset or is ``name`` itself.
    """
    named = get_benchmark(session, name)
    members = [b for b in list_benchmarks(session) if b.base_dataset == named.base_dataset]
    if id_benchmark is not None:
        clean = get_benchmark(session, id_benchmark)
        if clean.base_dataset != named.base_dataset:
            raise IntakeError(
                f"id_benchmark={id_benchmark!r} is a {clean.base_dataset} benchmark but "
                f"{name!r} is {named.base_dataset}; pick a clean benchmark of the same base "
                "dataset",
                code="invalid_request",
            )
    else:
        found = [b for b in members if b.name == named.base_dataset]
        if not found:
            raise NotFoundError(
                f"the {named.base_dataset} family has no clean benchmark named "
                f"{named.base_dataset!r}; pass id_benchmark= (one of "
                f"{sorted(b.name for b in members)})"
            )
        clean = found[0]
    oods = tuple(b for b in members if b.id != clean.id) if named.id == clean.id else (named,)
    if not oods:
        raise NotFoundError(
            f"benchmark {name!r} has no out-of-distribution benchmark of the same base dataset "
            f"({named.base_dataset}) to analyse"
        )
    return Family(clean=clean, oods=oods)


def has_analysis(session: Session, name: str) -> bool:
    """Whether benchmark ``name`` belongs to a family an analysis can cover (for page links)."""
    try:
        resolve_family(session, name)
    except NotFoundError:
        return False
    return True


@dataclass(frozen=True)
class StoredEntry:
    """One visible finished entry: counts of images right at r = 0 (smoothed) on the benchmark
    aggregate, per test set (``detail`` loads only) and for the base classifier where measured,
    and its lens figures with the protocol fingerprint they were computed under."""

    submission_id: int
    model_name: str
    owner: str
    sigma: float
    identity: str
    aggregate: Accuracy
    base: Accuracy | None = None
    sets: dict[str, Accuracy] = field(default_factory=dict)
    lens: dict[str, float] = field(default_factory=dict)
    lens_fingerprint: str | None = None
    architecture: str = ""


def architecture_name(manifest: dict[str, Any]) -> str:
    """The architecture an entry's predictor fits group it under: the manifest's registered
    name with its keyword arguments (``wrn(depth=28, width=10)``), as the paper groups models
    by network (Conv8, ResNet-18, VGG-16)."""
    architecture = manifest.get("architecture") or {}
    kwargs = architecture.get("kwargs") or {}
    name = str(architecture.get("name") or "")
    if not kwargs:
        return name
    return f"{name}({', '.join(f'{k}={v}' for k, v in sorted(kwargs.items()))})"


def model_identity(weights_sha256: str, manifest: dict[str, Any]) -> str:
    """The matching key of a classifier: weights hash + the model part of its manifest
    (architecture name and kwargs, classes, preprocessing, input size), in a canonical form."""
    architecture = manifest.get("architecture") or {}
    preprocessing = manifest.get("preprocessing") or {}
    model = (
        architecture.get("name"),
        tuple(sorted((architecture.get("kwargs") or {}).items())),
        manifest.get("num_classes"),
        tuple(map(float, preprocessing.get("mean") or ())),
        tuple(map(float, preprocessing.get("std") or ())),
        tuple(manifest.get("input_size") or (3, 32, 32)),
    )
    return f"{weights_sha256}:{model!r}"


def counted(fraction: float | None, total: int) -> Accuracy | None:
    """A stored accuracy as counts (certified accuracy is k/n of ``total`` images exactly)."""
    if fraction is None or total < 1:
        return None
    return Accuracy(round(fraction * total), int(total))


def load_entries(
    session: Session, benchmark: Benchmark, *, viewer: User | None, detail: bool
) -> list[StoredEntry]:
    """The benchmark's finished entries under its current protocol that ``viewer`` may see
    (hidden and private ones only for their owners and admins), oldest first.

    Without ``detail`` only the aggregate (``cert_acc_000``) is read, what the leaderboard's ER
    column needs; ``detail`` adds the base accuracy, the lens figures, the per-test-set results
    and the lens protocol fingerprints (one more query over ``stage_results``).
    """
    rows = session.execute(
        select(
            LeaderboardEntry.count,
            Submission.id,
            Submission.model_name,
            Submission.sigma,
            Artifact.sha256,
            Artifact.manifest,
            User.name,
        )
        .join(Submission, Submission.id == LeaderboardEntry.submission_id)
        .join(Artifact, Artifact.id == Submission.artifact_id)
        .join(User, User.id == Submission.user_id)
        .where(
            LeaderboardEntry.benchmark_id == benchmark.id,
            LeaderboardEntry.protocol_version == benchmark.protocol_version,
            Submission.state == SubmissionState.FINISHED,
            visibility_filter(viewer),
        )
        .order_by(Submission.id)
    ).all()
    keys = (ID_METRIC, BASE_METRIC, *LENS_KEYS) if detail else (ID_METRIC,)
    figures = _figures(session, benchmark, [row.id for row in rows], keys)
    stored = _stage_rows(session, [row.id for row in rows]) if detail else {}
    out = []
    for count, sid, model_name, sigma, sha256, manifest, owner in rows:
        mine = figures.get(sid, {})
        aggregate = counted(mine.get(ID_METRIC), count)
        if aggregate is None:
            continue
        results = stored.get(sid, {})
        out.append(
            StoredEntry(
                submission_id=sid,
                model_name=model_name,
                owner=owner,
                sigma=float(sigma),
                identity=model_identity(sha256, manifest),
                aggregate=aggregate,
                base=_base(mine, results.get(("pd_robustness", ""))),
                sets=_per_set(results),
                lens={k: v for k in LENS_KEYS if (v := mine.get(k)) is not None} if detail else {},
                lens_fingerprint=_fingerprint(results.get(("fourier_lens", "base"))),
                architecture=architecture_name(manifest),
            )
        )
    return out


def _figures(
    session: Session, benchmark: Benchmark, ids: Sequence[int], keys: Sequence[str]
) -> dict[int, dict[str, float | None]]:
    """The few stored figures an analysis reads, of the entries ``ids`` (one query walking the
    (benchmark, key, value) index; filtering by id in SQL would revisit it once per id chunk)."""
    wanted = set(ids)
    out: dict[int, dict[str, float | None]] = {}
    rows = session.execute(
        select(MetricValue.submission_id, MetricValue.key, MetricValue.value).where(
            MetricValue.benchmark_id == benchmark.id,
            MetricValue.key.in_(keys),
        )
    ).all()
    for sid, key, value in rows:
        if sid in wanted:
            out.setdefault(sid, {})[key] = value
    return out


def _stage_rows(session: Session, ids: Sequence[int]) -> dict[int, dict[tuple[str, str], Any]]:
    """(stage, unit) → (summary, count, protocol) of each submission's stored results."""
    out: dict[int, dict[tuple[str, str], Any]] = {}
    for chunk in range(0, len(ids), CHUNK):
        rows = session.execute(
            select(
                StageResult.submission_id,
                StageResult.stage,
                StageResult.unit,
                StageResult.summary,
                StageResult.count,
                StageResult.protocol,
            ).where(
                StageResult.submission_id.in_(ids[chunk : chunk + CHUNK]),
                StageResult.stage.in_(("certification", "pd_robustness", "fourier_lens")),
            )
        ).all()
        for sid, stage, unit, summary, count, protocol in rows:
            out.setdefault(sid, {})[(stage, unit)] = (summary, count, protocol)
    return out


def _per_set(results: dict[tuple[str, str], Any]) -> dict[str, Accuracy]:
    out = {}
    for (stage, unit), (summary, count, _) in results.items():
        if stage == "certification":
            accuracy = counted(summary.get("certified_accuracy", {}).get("0"), count)
            if accuracy is not None:
                out[unit] = accuracy
    return out


def _base(figures: dict[str, float | None], result: Any) -> Accuracy | None:
    """The base classifier's clean accuracy as counts (its stored result gives the images)."""
    if result is None:
        return None
    return counted(figures.get(BASE_METRIC), result[1])


def _fingerprint(result: Any) -> str | None:
    return None if result is None else result[2].get("fingerprint")


@dataclass(frozen=True)
class Matched:
    """A clean entry and its OOD partners (OOD benchmark name → entry), one σ."""

    clean: StoredEntry
    partners: dict[str, StoredEntry]


def match(
    clean: Sequence[StoredEntry], oods: Mapping[str, Sequence[StoredEntry]]
) -> tuple[list[Matched], dict[str, list[StoredEntry]]]:
    """Pair entries by (identity, σ); returns the matched clean entries (with at least one
    partner) and, per OOD benchmark, its entries without a clean partner."""
    first: dict[tuple[str, float], StoredEntry] = {}
    for entry in clean:
        first.setdefault((entry.identity, entry.sigma), entry)
    partners: dict[tuple[str, float], dict[str, StoredEntry]] = {}
    unmatched: dict[str, list[StoredEntry]] = {}
    for bench, entries in oods.items():
        for entry in entries:
            key = (entry.identity, entry.sigma)
            if key not in first:
                unmatched.setdefault(bench, []).append(entry)
            else:
                partners.setdefault(key, {}).setdefault(bench, entry)
    matched = [Matched(first[key], found) for key, found in partners.items()]
    matched.sort(key=lambda m: m.clean.submission_id)
    return matched, unmatched
