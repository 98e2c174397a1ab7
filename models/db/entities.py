"""The ORM: users and tokens, benchmarks and test sets, artifacts, submissions, and the
evaluation stages' shards, results and leaderboard figures.

Typed SQLAlchemy 2 mappings. Every stage shares three tables: ``stage_shards`` (one row per
recorded shard), ``stage_results`` (one per merged unit) and ``metric_values`` (one per
leaderboard figure, indexed by (benchmark, key, value) so any figure sorts a 10,000-entry
leaderboard through one index). ``leaderboard_entries`` marks a finished submission's entry.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ColumnElement,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from models.db.base import Base, UTCDateTime, utcnow
from models.db.roles import Role
from models.db.states import DEDUP_STATES, SubmissionState


def _enum(cls: type[StrEnum], name: str) -> Enum:
    """Enums stored as their string values in a VARCHAR (portable, readable, no PG enum type)."""
    return Enum(
        cls,
        name=name,
        native_enum=False,
        create_constraint=False,
        length=16,
        values_callable=lambda members: [m.value for m in members],
        validate_strings=True,
    )


class User(Base):
    """An account; authenticates with one or more API tokens (stored hashed)."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    email: Mapped[str | None] = mapped_column(String(254))
    role: Mapped[Role] = mapped_column(_enum(Role, "role"), default=Role.SUBMITTER)
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    tokens: Mapped[list[ApiToken]] = relationship(
        back_populates="user", cascade="all, delete-orphan"
    )


class ApiToken(Base):
    """A bearer token. Only its SHA-256 is stored; ``prefix`` lets a user tell tokens apart."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    label: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    user: Mapped[User] = relationship(back_populates="tokens")


class UploadRefusal(Base):
    """One upload the API refused before storing anything (``models.submissions.refusals``): such
    uploads create no submission, so only these rows let a rate limit see them."""

    __tablename__ = "upload_refusals"
    __table_args__ = (Index("ix_upload_refusals_user_at", "user_id", "at"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    code: Mapped[str] = mapped_column(String(32))


class Benchmark(Base):
    """A benchmark loaded from a versioned definition file (see ``models.catalog.benchmarks``)."""

    __tablename__ = "benchmarks"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    title: Mapped[str] = mapped_column(String(128))
    description: Mapped[str] = mapped_column(Text, default="")
    base_dataset: Mapped[str] = mapped_column(String(64))
    num_classes: Mapped[int] = mapped_column(Integer)
    sigmas: Mapped[list[float]] = mapped_column(JSON)
    definition_version: Mapped[int] = mapped_column(Integer)
    definition_sha256: Mapped[str] = mapped_column(String(64))
    protocol_version: Mapped[str] = mapped_column(String(32))
    n0: Mapped[int] = mapped_column(Integer)
    n: Mapped[int] = mapped_column(Integer)
    alpha: Mapped[float] = mapped_column(Float)
    seed: Mapped[int] = mapped_column(Integer, default=0)
    bands: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # Protocols of the evaluation stages beyond certification, by stage name (each the stage's
    # definition block as JSON, with derived fields such as the image subset).
    stages: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=dict)
    # Caps on a submitted network (``models.benchmarks.definitions.CostLimits``: parameters,
    # FLOPs per sample); None for a benchmark loaded before caps existed: the defaults apply.
    limits: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    test_sets: Mapped[list[TestSet]] = relationship(
        back_populates="benchmark", order_by="TestSet.position", cascade="all, delete-orphan"
    )

    @property
    def robustness(self) -> dict[str, Any] | None:
        """The stored protocol of the PD robustness stage (None without that stage)."""
        return (self.stages or {}).get("pd_robustness")


class TestSet(Base):
    """One dataset config a benchmark certifies on, with the image subset of the protocol."""

    __tablename__ = "test_sets"
    __table_args__ = (UniqueConstraint("benchmark_id", "name"),)
    __test__ = False  # not a pytest test class despite the name

    id: Mapped[int] = mapped_column(primary_key=True)
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    position: Mapped[int] = mapped_column(Integer)
    dataset_repo: Mapped[str] = mapped_column(String(128))
    dataset_folder: Mapped[str | None] = mapped_column(String(512))
    config: Mapped[str | None] = mapped_column(String(64))
    revision: Mapped[str | None] = mapped_column(String(64))
    split: Mapped[str] = mapped_column(String(32), default="test")
    subset_skip: Mapped[int] = mapped_column(Integer, default=1)
    subset_limit: Mapped[int | None] = mapped_column(Integer)
    num_images: Mapped[int] = mapped_column(Integer)
    band: Mapped[str | None] = mapped_column(String(16))
    attributes: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # Where the test set's bytes come from and their content hash (``models.benchmarks.data_pins``);
    # empty for a test set whose definition pins nothing.
    provenance: Mapped[dict[str, Any]] = mapped_column(
        JSON, default=dict, server_default=text("'{}'")
    )

    benchmark: Mapped[Benchmark] = relationship(back_populates="test_sets")


class Artifact(Base):
    """Uploaded weights + manifest, content-addressed by their SHA-256 values.

    ``weights_path`` is relative to ``Settings.artifacts_dir``; it is None once the file was
    deleted (a rejected upload keeps its metadata row for the record but no bytes on disk).
    """

    __tablename__ = "artifacts"
    __table_args__ = (UniqueConstraint("sha256", "manifest_sha256"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64))
    size_bytes: Mapped[int] = mapped_column(Integer)
    manifest: Mapped[dict[str, Any]] = mapped_column(JSON)
    manifest_sha256: Mapped[str] = mapped_column(String(64))
    weights_path: Mapped[str | None] = mapped_column(String(512))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class WeightsFile(Base):
    """One stored weights file (``storage.weights_relpath(sha256)``), shared by every artifact
    with those bytes.

    The row is the lock that intake and release take (``models.submissions.artifacts``) before they
    look at or change the file, so a release that counts no remaining user and deletes the file can
    never interleave with an intake that is about to reference it. ``stored`` says whether the file
    is on disk; the reference count is counted under that lock, never kept as a number that could
    drift.
    """

    __tablename__ = "weights_files"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    stored: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


#: At most one submission per dedup key may be in a ``DEDUP_STATES`` state (an original that is
#: live or finished); the partial unique index below says so in SQL.
_LIVE_DEDUP_SQL = "state IN ({})".format(", ".join(f"'{s.value}'" for s in sorted(DEDUP_STATES)))


class Submission(Base):
    """One request to certify an artifact on a benchmark; moves through ``SubmissionState``."""

    __tablename__ = "submissions"
    __table_args__ = (
        Index("ix_submissions_state_id", "state", "id"),
        Index("ix_submissions_user_created", "user_id", "created_at"),
        # leaderboard sorts on submission columns
        Index("ix_submissions_benchmark_created", "benchmark_id", "created_at"),
        Index("ix_submissions_benchmark_sigma", "benchmark_id", "sigma"),
        Index("ix_submissions_benchmark_model_name", "benchmark_id", "model_name"),
        # Dedup in the database: two identical uploads racing cannot both become originals.
        Index(
            "uq_submissions_live_dedup_key",
            "dedup_key",
            unique=True,
            postgresql_where=text(_LIVE_DEDUP_SQL),
            sqlite_where=text(_LIVE_DEDUP_SQL),
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id"), index=True)
    artifact_id: Mapped[int] = mapped_column(ForeignKey("artifacts.id"), index=True)
    state: Mapped[SubmissionState] = mapped_column(
        _enum(SubmissionState, "submission_state"), default=SubmissionState.SUBMITTED
    )
    reason: Mapped[str | None] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text, default="")
    is_private: Mapped[bool] = mapped_column(Boolean, default=False)
    hidden: Mapped[bool] = mapped_column(Boolean, default=False)
    flagged: Mapped[bool] = mapped_column(Boolean, default=False)
    flag_reason: Mapped[str | None] = mapped_column(Text)
    is_baseline: Mapped[bool] = mapped_column(Boolean, default=False)
    model_name: Mapped[str] = mapped_column(String(128))
    architecture: Mapped[str] = mapped_column(String(64))
    sigma: Mapped[float] = mapped_column(Float)
    extra_data: Mapped[bool] = mapped_column(Boolean, default=False)
    venue: Mapped[str | None] = mapped_column(String(64))
    # Model zoo: the submitter publishes the weights under an SPDX licence
    # (``certbench.data.licenses``); served only for a finished, public, visible entry.
    weights_public: Mapped[bool] = mapped_column(
        Boolean, default=False, server_default=text("false")
    )
    weights_license: Mapped[str | None] = mapped_column(String(32))
    protocol_version: Mapped[str] = mapped_column(String(32))
    dedup_key: Mapped[str] = mapped_column(String(64), index=True)
    duplicate_of_id: Mapped[int | None] = mapped_column(
        ForeignKey("submissions.id", ondelete="SET NULL")
    )
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    # How often the reconciler re-sent this submission's validation after its lease lapsed.
    recoveries: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    shards_total: Mapped[int] = mapped_column(Integer, default=0)
    shards_done: Mapped[int] = mapped_column(Integer, default=0)
    # Fraction of the estimated forward passes done (recorded shards + running ones' partial
    # counts), written by ``models.runs.progress.refresh``; the API recomputes it live.
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    # The work the submission was estimated at when it was made (``models.runs.estimates``): what
    # the daily compute quota counts. None for submissions from before the estimate existed.
    estimated_forward_passes: Mapped[int | None] = mapped_column(BigInteger)
    # The network's FLOPs per noise sample, counted at intake on the ``meta`` device
    # (``certbench.nets.cost``): what scales the fleet's FLOP rate to this submission's ETA.
    # None for submissions from before it was counted, and for those made outside the API.
    flops_per_sample: Mapped[int | None] = mapped_column(BigInteger)
    worker: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, index=True)

    user: Mapped[User] = relationship()
    benchmark: Mapped[Benchmark] = relationship()
    artifact: Mapped[Artifact] = relationship()
    events: Mapped[list[SubmissionEvent]] = relationship(
        order_by="SubmissionEvent.id", cascade="all, delete-orphan", passive_deletes=True
    )


class SubmissionEvent(Base):
    """Audit trail: one row per state transition, with its reason and message."""

    __tablename__ = "submission_events"

    id: Mapped[int] = mapped_column(primary_key=True)
    submission_id: Mapped[int] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"), index=True
    )
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    from_state: Mapped[SubmissionState | None] = mapped_column(
        _enum(SubmissionState, "submission_state")
    )
    to_state: Mapped[SubmissionState] = mapped_column(_enum(SubmissionState, "submission_state"))
    reason: Mapped[str | None] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text, default="")


class StageShard(Base):
    """A finished shard of any evaluation stage: images ``[start, stop)`` of one unit.

    Unique on (submission, stage, unit, shard index): a redelivered task that finishes the same
    shard again finds the row and changes nothing, and a resumed submission skips recorded shards.
    ``unit`` is the stage's name for the piece of work (a certification test set; ``""`` for a
    stage with one unit).
    """

    __tablename__ = "stage_shards"
    __table_args__ = (UniqueConstraint("submission_id", "stage", "unit", "shard_index"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id", ondelete="CASCADE"))
    stage: Mapped[str] = mapped_column(String(32))
    unit: Mapped[str] = mapped_column(String(64))
    shard_index: Mapped[int] = mapped_column(Integer)
    start: Mapped[int] = mapped_column(Integer)
    stop: Mapped[int] = mapped_column(Integer)
    count: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[float] = mapped_column(Float)
    records_path: Mapped[str] = mapped_column(String(512))
    worker: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ShardDispatch(Base):
    """What the broker was asked to run, and who runs it now: the database's record of work in
    flight, so work whose message the broker lost is found and sent again.

    One row per planned shard once it was first sent: ``dispatched_at`` (last time a message was
    sent) and ``dispatches`` (how many were sent); ``claimed_by``/``claimed_until`` the worker
    computing it and its lease (renewed by heartbeats); ``expired_claims`` how many workers died
    on it, with their ``history`` (and how earlier attempts stopped: cancelled, ...). A recorded
    shard's row is kept for its history.

    Progress of the current attempt (``models.runs.progress``): ``images_done`` and ``samples_done``
    (forward passes, under the stage's estimate) since ``started_at`` (when it was claimed),
    written by the worker's lease at most every few seconds (``updated_at``) and, when the shard
    is recorded, set to its final counts: the measured samples/s of this fleet.
    """

    __tablename__ = "shard_dispatches"

    submission_id: Mapped[int] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"), primary_key=True
    )
    stage: Mapped[str] = mapped_column(String(32), primary_key=True)
    unit: Mapped[str] = mapped_column(String(64), primary_key=True)
    shard_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    dispatched_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    dispatches: Mapped[int] = mapped_column(Integer, default=1)
    claimed_by: Mapped[str | None] = mapped_column(String(128))
    claimed_until: Mapped[datetime | None] = mapped_column(UTCDateTime, index=True)
    expired_claims: Mapped[int] = mapped_column(Integer, default=0)
    history: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    images_done: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    samples_done: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    @classmethod
    def held(
        cls, submission_id: int, key: tuple[str, str, int], worker: str
    ) -> tuple[ColumnElement[bool], ...]:
        """Conditions selecting shard ``key``'s row while ``worker`` holds its claim (updates
        by a worker that lost the claim then touch nothing)."""
        stage, unit, index = key
        return (
            cls.submission_id == submission_id,
            cls.stage == stage,
            cls.unit == unit,
            cls.shard_index == index,
            cls.claimed_by == worker,
        )


class StageResult(Base):
    """A stage's merged result for one unit of a submission: its JSON summary (what the stage's
    ``merge`` computed from the per-image records), the merged records file and provenance
    (the protocol as run, the seeds, content hashes of the data)."""

    __tablename__ = "stage_results"
    __table_args__ = (UniqueConstraint("submission_id", "stage", "unit"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id", ondelete="CASCADE"))
    stage: Mapped[str] = mapped_column(String(32))
    unit: Mapped[str] = mapped_column(String(64))
    evaluator_version: Mapped[str] = mapped_column(String(32))
    protocol: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    summary: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    seeds: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    data_hashes: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    count: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[float] = mapped_column(Float)
    records_path: Mapped[str] = mapped_column(String(512))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class MetricValue(Base):
    """One leaderboard figure of a finished submission, in the one shape every stage shares.

    The leaderboard sorts and filters on (benchmark, key, value) through one index, so a new
    stage's columns need no migration. ``value`` is None for "not measured".
    """

    __tablename__ = "metric_values"
    __table_args__ = (
        Index("ix_metric_values_benchmark_key_value", "benchmark_id", "key", "value"),
    )

    submission_id: Mapped[int] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(String(48), primary_key=True)
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id", ondelete="CASCADE"))
    stage: Mapped[str] = mapped_column(String(32))
    value: Mapped[float | None] = mapped_column(Float)


_figure_keys: set[str] = set()


def declare_figures(keys: Iterable[str]) -> None:
    """Declare metric keys a stage writes, so that ``LeaderboardEntry`` tells a known figure
    that was not measured (None) from a typo (AttributeError).

    The stage registry calls it for every stage it registers (``models.stages.registry``): the
    database layer sits below the stages and never imports them, so they are named to it.
    """
    _figure_keys.update(keys)


def known_figures() -> frozenset[str]:
    """Every metric key declared so far (``declare_figures``)."""
    return frozenset(_figure_keys)


class LeaderboardEntry(Base):
    """A finished submission's place on its benchmark's leaderboard, written once at the end.

    The figures live in ``MetricValue`` rows (``metrics``); this row says the entry exists, under
    which protocol version, and how much work it took (test sets, images certified, seconds).
    """

    __tablename__ = "leaderboard_entries"
    __table_args__ = (
        Index("ix_leaderboard_entries_benchmark_finished_at", "benchmark_id", "finished_at"),
    )
    submission_id: Mapped[int] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"), primary_key=True
    )
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id", ondelete="CASCADE"))
    protocol_version: Mapped[str] = mapped_column(String(32))
    test_sets: Mapped[int] = mapped_column(Integer)
    count: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    submission: Mapped[Submission] = relationship()
    metric_rows: Mapped[list[MetricValue]] = relationship(
        primaryjoin="LeaderboardEntry.submission_id == foreign(MetricValue.submission_id)",
        viewonly=True,
        lazy="selectin",
    )

    @property
    def metrics(self) -> dict[str, float | None]:
        """Every stored figure of this entry by key."""
        return {row.key: row.value for row in self.metric_rows}

    def __getattr__(self, name: str) -> float | None:
        """A stage's figure by its metric key (``entry.macr``); None when not measured."""
        if not name.startswith("_"):
            metrics = self.metrics
            if name in metrics:
                return metrics[name]
            if name in _figure_keys:  # a registered stage's figure (``declare_figures``)
                return None
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class LeaderboardFigures(Base):
    """The leaderboard's read model: one row per entry holding what a page shows of it that
    does not change after it finished, so a 50-row page reads 50 rows, not ~1,650 figures.

    ``figures`` is every stored figure of the entry by key (the ``metric_values`` rows, null for
    "not measured"); ``card`` the manifest's display fields and the weights file's hash and size
    (an artifact never changes). Written by ``models.boards.read_model.refresh`` in the same
    transaction as the figures it copies; sorting still walks the ``metric_values`` index.
    """

    __tablename__ = "leaderboard_rows"

    submission_id: Mapped[int] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"), primary_key=True
    )
    benchmark_id: Mapped[int] = mapped_column(
        ForeignKey("benchmarks.id", ondelete="CASCADE"), index=True
    )
    figures: Mapped[dict[str, Any]] = mapped_column(JSON)
    card: Mapped[dict[str, Any]] = mapped_column(JSON)


class RunSeed(Base):
    """The noise seed of a submission's current evaluation run (``models.submissions.run_seeds``).

    ``kind`` ``secret``: drawn with ``secrets`` when the run was queued; only ``commitment``
    (SHA-256 of ``seed`` as written) is shown until the run ends, then ``seed`` is revealed.
    ``public``: the benchmark's public seed (rows from before commit-reveal). Kept apart from
    ``submissions`` so that no code serialising a submission can carry the secret by accident.
    """

    __tablename__ = "run_seeds"

    submission_id: Mapped[int] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"), primary_key=True
    )
    kind: Mapped[str] = mapped_column(String(8))
    seed: Mapped[str] = mapped_column(String(80))
    commitment: Mapped[str] = mapped_column(String(64))
    drawn_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
