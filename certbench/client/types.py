"""Typed views of the service's JSON responses, read defensively.

The client must keep working against servers a release older or newer than itself: every field
is read with a default, unknown fields are ignored, and the whole document stays available as
``raw``. Fields that newer servers add (``eta_seconds``, ``throughput`` and ``estimate`` of a
submission) are None when absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

#: States after which a submission no longer changes (until an admin re-runs it).
TERMINAL_STATES = frozenset({"finished", "failed", "rejected", "cancelled", "duplicate"})
#: Terminal states that mean the run did not produce results of its own.
UNSUCCESSFUL_STATES = frozenset({"failed", "rejected", "cancelled"})

Json = Mapping[str, Any]


def _mapping(value: Any) -> Json:
    return value if isinstance(value, Mapping) else {}


def _str(data: Json, key: str, default: str = "") -> str:
    value = data.get(key)
    return value if isinstance(value, str) else default


def _opt_str(data: Json, key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) else None


def _float(data: Json, key: str) -> float | None:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _int(data: Json, key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bool(data: Json, key: str) -> bool:
    return data.get(key) is True


def _time(data: Json, key: str) -> datetime | None:
    value = data.get(key)
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


@dataclass(frozen=True)
class Quota:
    """A user's usage over the last 24 hours and its limits."""

    submissions_today: int | None
    submissions_per_day: int | None
    unsuccessful_today: int | None
    unsuccessful_per_day: int | None
    active: int | None
    concurrent: int | None

    @classmethod
    def from_json(cls, data: Json) -> Quota:
        return cls(
            submissions_today=_int(data, "submissions_today"),
            submissions_per_day=_int(data, "submissions_per_day"),
            unsuccessful_today=_int(data, "unsuccessful_today"),
            unsuccessful_per_day=_int(data, "unsuccessful_per_day"),
            active=_int(data, "active"),
            concurrent=_int(data, "concurrent"),
        )


@dataclass(frozen=True)
class Me:
    """The account a token belongs to (``GET /api/v1/me``)."""

    id: int | None
    name: str
    role: str
    quota: Quota | None
    raw: Json = field(repr=False)

    @classmethod
    def from_json(cls, data: Json) -> Me:
        quota = data.get("quota")
        return cls(
            id=_int(data, "id"),
            name=_str(data, "name"),
            role=_str(data, "role"),
            quota=Quota.from_json(quota) if isinstance(quota, Mapping) else None,
            raw=data,
        )


@dataclass(frozen=True)
class Throughput:
    """What the workers measured on this run."""

    samples_per_second: float | None
    images_per_second: float | None

    @classmethod
    def from_json(cls, data: Any) -> Throughput | None:
        if not isinstance(data, Mapping):
            return None
        return cls(
            samples_per_second=_float(data, "samples_per_second"),
            images_per_second=_float(data, "images_per_second"),
        )


@dataclass(frozen=True)
class Estimate:
    """The work of a run estimated at intake: forward passes, FLOPs (what the compute quota
    charges), and time on this fleet."""

    forward_passes: int | None
    seconds: float | None
    basis: str | None
    flops: int | None = None

    @classmethod
    def from_json(cls, data: Any) -> Estimate | None:
        if not isinstance(data, Mapping):
            return None
        return cls(
            forward_passes=_int(data, "forward_passes"),
            seconds=_float(data, "seconds"),
            basis=_opt_str(data, "basis"),
            flops=_int(data, "flops"),
        )


@dataclass(frozen=True)
class WeightsLink:
    """Where anyone may download an entry's published weights (model zoo)."""

    license: str
    url: str
    manifest_url: str | None
    sha256: str | None
    size_bytes: int | None

    @classmethod
    def from_json(cls, data: Any) -> WeightsLink | None:
        if not isinstance(data, Mapping) or not data.get("url"):
            return None
        return cls(
            license=_str(data, "license"),
            url=_str(data, "url"),
            manifest_url=_opt_str(data, "manifest_url"),
            sha256=_opt_str(data, "sha256"),
            size_bytes=_int(data, "size_bytes"),
        )


@dataclass(frozen=True)
class Submission:
    """A submission as its owner sees it (``GET /api/v1/submissions/{id}``)."""

    id: int
    state: str
    reason: str | None
    message: str
    benchmark: str
    model_name: str
    architecture: str
    sigma: float | None
    is_private: bool
    progress: float
    queue_position: int | None
    shards_done: int | None
    shards_total: int | None
    duplicate_of: int | None
    weights_sha256: str | None
    weights_size: int | None
    weights_public: bool
    weights_license: str | None
    weights: WeightsLink | None
    eta_seconds: float | None
    throughput: Throughput | None
    estimate: Estimate | None
    created_at: datetime | None
    finished_at: datetime | None
    raw: Json = field(repr=False)

    @classmethod
    def from_json(cls, data: Json) -> Submission:
        progress = _float(data, "progress")
        return cls(
            id=_int(data, "id") or 0,
            state=_str(data, "state", "unknown"),
            reason=_opt_str(data, "reason"),
            message=_str(data, "message"),
            benchmark=_str(data, "benchmark"),
            model_name=_str(data, "model_name"),
            architecture=_str(data, "architecture"),
            sigma=_float(data, "sigma"),
            is_private=_bool(data, "is_private"),
            progress=min(max(progress or 0.0, 0.0), 1.0),
            queue_position=_int(data, "queue_position"),
            shards_done=_int(data, "shards_done"),
            shards_total=_int(data, "shards_total"),
            duplicate_of=_int(data, "duplicate_of"),
            weights_sha256=_opt_str(data, "weights_sha256"),
            weights_size=_int(data, "weights_size"),
            weights_public=_bool(data, "weights_public"),
            weights_license=_opt_str(data, "weights_license"),
            weights=WeightsLink.from_json(data.get("weights")),
            eta_seconds=_float(data, "eta_seconds"),
            throughput=Throughput.from_json(data.get("throughput")),
            estimate=Estimate.from_json(data.get("estimate")),
            created_at=_time(data, "created_at"),
            finished_at=_time(data, "finished_at"),
            raw=data,
        )

    @property
    def terminal(self) -> bool:
        """The run has ended (finished, failed, rejected, cancelled, or a duplicate)."""
        return self.state in TERMINAL_STATES

    @property
    def unsuccessful(self) -> bool:
        """Ended without results of its own: failed, rejected or cancelled."""
        return self.state in UNSUCCESSFUL_STATES


@dataclass(frozen=True)
class TestSetProgress:
    """Images certified so far on one test set."""

    __test__ = False

    test_set: str
    images_done: int
    images_total: int

    @classmethod
    def from_json(cls, data: Json) -> TestSetProgress:
        return cls(
            test_set=_str(data, "test_set"),
            images_done=_int(data, "images_done") or 0,
            images_total=_int(data, "images_total") or 0,
        )


@dataclass(frozen=True)
class TestSetResult:
    """One test set's figures."""

    __test__ = False

    test_set: str
    acr: float | None
    certified_accuracy: dict[str, float]
    clean_accuracy: float | None
    abstain_rate: float | None
    count: int | None
    seconds: float | None
    raw: Json = field(repr=False)

    @classmethod
    def from_json(cls, data: Json) -> TestSetResult:
        curve = _mapping(data.get("certified_accuracy"))
        return cls(
            test_set=_str(data, "test_set"),
            acr=_float(data, "acr"),
            certified_accuracy={
                str(k): float(v) for k, v in curve.items() if isinstance(v, int | float)
            },
            clean_accuracy=_float(data, "clean_accuracy"),
            abstain_rate=_float(data, "abstain_rate"),
            count=_int(data, "count"),
            seconds=_float(data, "seconds"),
            raw=data,
        )


@dataclass(frozen=True)
class Results:
    """A submission's results (``GET /api/v1/results/{id}``): the leaderboard summary (means
    over test sets, None until finished) and each test set's figures."""

    submission_id: int
    benchmark: str
    model_name: str
    state: str
    summary: Json | None
    results: list[TestSetResult]
    weights: WeightsLink | None
    raw: Json = field(repr=False)

    @classmethod
    def from_json(cls, data: Json) -> Results:
        summary = data.get("summary")
        rows = data.get("results")
        return cls(
            submission_id=_int(data, "submission_id") or 0,
            benchmark=_str(data, "benchmark"),
            model_name=_str(data, "model_name"),
            state=_str(data, "state", "unknown"),
            summary=summary if isinstance(summary, Mapping) else None,
            results=[
                TestSetResult.from_json(r)
                for r in (rows if isinstance(rows, list) else [])
                if isinstance(r, Mapping)
            ],
            weights=WeightsLink.from_json(data.get("weights")),
            raw=data,
        )


@dataclass(frozen=True)
class LeaderboardRow:
    """One ranked entry."""

    rank: int | None
    submission_id: int
    model_name: str
    owner: str
    architecture: str
    sigma: float | None
    metrics: Json
    tied_with: int | None
    weights: WeightsLink | None
    raw: Json = field(repr=False)

    @classmethod
    def from_json(cls, data: Json) -> LeaderboardRow:
        return cls(
            rank=_int(data, "rank"),
            submission_id=_int(data, "submission_id") or 0,
            model_name=_str(data, "model_name"),
            owner=_str(data, "owner"),
            architecture=_str(data, "architecture"),
            sigma=_float(data, "sigma"),
            metrics=_mapping(data.get("metrics")),
            tied_with=_int(data, "tied_with"),
            weights=WeightsLink.from_json(data.get("weights")),
            raw=data,
        )


@dataclass(frozen=True)
class Leaderboard:
    """A page of a benchmark's leaderboard."""

    benchmark: str
    sort: str
    order: str
    total: int
    offset: int
    limit: int
    rows: list[LeaderboardRow]
    raw: Json = field(repr=False)
    sort_label: str = ""
    """The label of the column sorted by (``sort`` is its key), when the server says it."""

    @classmethod
    def from_json(cls, data: Json) -> Leaderboard:
        rows = data.get("rows")
        return cls(
            benchmark=_str(data, "benchmark"),
            sort=_str(data, "sort"),
            order=_str(data, "order"),
            total=_int(data, "total") or 0,
            offset=_int(data, "offset") or 0,
            limit=_int(data, "limit") or 0,
            rows=[
                LeaderboardRow.from_json(r)
                for r in (rows if isinstance(rows, list) else [])
                if isinstance(r, Mapping)
            ],
            raw=data,
            sort_label=_str(data, "sort_label"),
        )


@dataclass(frozen=True)
class EntryWeights:
    """What to know before downloading an entry's weights (``GET /api/v1/entries/{id}``)."""

    submission_id: int
    benchmark: str
    model_name: str
    architecture: str
    sigma: float | None
    state: str
    public: bool
    license: str | None
    sha256: str
    size_bytes: int | None
    manifest: Json
    weights_url: str
    manifest_url: str | None
    raw: Json = field(repr=False)

    @classmethod
    def from_json(cls, data: Json) -> EntryWeights:
        return cls(
            submission_id=_int(data, "submission_id") or 0,
            benchmark=_str(data, "benchmark"),
            model_name=_str(data, "model_name"),
            architecture=_str(data, "architecture"),
            sigma=_float(data, "sigma"),
            state=_str(data, "state", "unknown"),
            public=_bool(data, "public"),
            license=_opt_str(data, "license"),
            sha256=_str(data, "sha256"),
            size_bytes=_int(data, "size_bytes"),
            manifest=_mapping(data.get("manifest")),
            weights_url=_str(data, "weights_url"),
            manifest_url=_opt_str(data, "manifest_url"),
            raw=data,
        )
