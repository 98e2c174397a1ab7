"""The ORM: users and tokens, benchmarks and test sets, artifacts, submissions, shards, results
(certified and robust).

Typed SQLAlchemy 2 mappings. Everything the leaderboard sorts on is a real, indexed column (the
per-submission ``LeaderboardEntry`` is written once when a submission finishes), so a page of a
10,000-entry leaderboard is one indexed query, not an aggregation over per-test-set results.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
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

from models.base import Base, UTCDateTime, utcnow
from models.states import DEDUP_STATES, SubmissionState


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


class Role(StrEnum):
    """What a user may do: submitters submit and read their own; admins manage everything."""

    SUBMITTER = "submitter"
    ADMIN = "admin"


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


class Benchmark(Base):
    """A benchmark loaded from a versioned definition file (see ``models.catalog``)."""

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
    # The robustness stage's protocol (``models.catalog.RobustnessProtocol`` as JSON, with the
    # derived image subset); None for a benchmark without one.
    robustness: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    test_sets: Mapped[list[TestSet]] = relationship(
        back_populates="benchmark", order_by="TestSet.position", cascade="all, delete-orphan"
    )


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

    The row is the lock that intake and release take (``models.artifacts``) before they look at
    or change the file, so a release that counts no remaining user and deletes the file can never
    interleave with an intake that is about to reference it. ``stored`` says whether the file is
    on disk; the reference count is counted under that lock, never kept as a number that could
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
    protocol_version: Mapped[str] = mapped_column(String(32))
    dedup_key: Mapped[str] = mapped_column(String(64), index=True)
    duplicate_of_id: Mapped[int | None] = mapped_column(
        ForeignKey("submissions.id", ondelete="SET NULL")
    )
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    shards_total: Mapped[int] = mapped_column(Integer, default=0)
    shards_done: Mapped[int] = mapped_column(Integer, default=0)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
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


class Shard(Base):
    """A finished certify shard: images ``[start, stop)`` of a test set's protocol subset.

    Unique on (submission, test set, shard index): a redelivered task that finishes the same shard
    again finds the row and changes nothing, and a resumed submission skips finished shards.
    """

    __tablename__ = "shards"
    __table_args__ = (UniqueConstraint("submission_id", "test_set_id", "shard_index"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id", ondelete="CASCADE"))
    test_set_id: Mapped[int] = mapped_column(ForeignKey("test_sets.id", ondelete="CASCADE"))
    shard_index: Mapped[int] = mapped_column(Integer)
    start: Mapped[int] = mapped_column(Integer)
    stop: Mapped[int] = mapped_column(Integer)
    count: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[float] = mapped_column(Float)
    records_path: Mapped[str] = mapped_column(String(512))
    worker: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Result(Base):
    """Metrics of one submission on one test set, computed from its per-image records."""

    __tablename__ = "results"
    __table_args__ = (UniqueConstraint("submission_id", "test_set_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id", ondelete="CASCADE"))
    test_set_id: Mapped[int] = mapped_column(
        ForeignKey("test_sets.id", ondelete="CASCADE"), index=True
    )
    protocol_version: Mapped[str] = mapped_column(String(32))
    evaluator_version: Mapped[str] = mapped_column(String(32))
    acr: Mapped[float] = mapped_column(Float)
    certified_accuracy: Mapped[dict[str, float]] = mapped_column(JSON)
    clean_accuracy: Mapped[float] = mapped_column(Float)
    abstain_rate: Mapped[float] = mapped_column(Float)
    pa_median: Mapped[float] = mapped_column(Float)
    pa_quantiles: Mapped[dict[str, float]] = mapped_column(JSON)
    count: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[float] = mapped_column(Float)
    records_path: Mapped[str] = mapped_column(String(512))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    test_set: Mapped[TestSet] = relationship()


class RobustnessShard(Base):
    """A finished robustness shard: images ``[start, stop)`` of the benchmark's clean subset.

    Unique on (submission, shard index), for the same reason as ``Shard``.
    """

    __tablename__ = "robustness_shards"
    __table_args__ = (UniqueConstraint("submission_id", "shard_index"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id", ondelete="CASCADE"))
    shard_index: Mapped[int] = mapped_column(Integer)
    start: Mapped[int] = mapped_column(Integer)
    stop: Mapped[int] = mapped_column(Integer)
    count: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[float] = mapped_column(Float)
    records_path: Mapped[str] = mapped_column(String(512))
    worker: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class RobustnessResult(Base):
    """Robust accuracy of a submission's base classifier (seed 004 §6), from per-image records.

    ``base_accuracy`` is the deterministic classifier's clean accuracy (not the smoothed one);
    ``linf_acc_*``/``pd_acc_*`` the ℓ∞ and ℓ∞ ∩ PD robust accuracies at ε = 8/255 and 16/255
    (None when the protocol skips that ε). ``figures`` holds every figure of the report, e.g.
    which of the two PD attacks broke how many images; ``protocol`` the attack settings and the
    anchor bank's provenance and SHA-256.
    """

    __tablename__ = "robustness_results"

    submission_id: Mapped[int] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"), primary_key=True
    )
    evaluator_version: Mapped[str] = mapped_column(String(32))
    protocol: Mapped[dict[str, Any]] = mapped_column(JSON)
    base_accuracy: Mapped[float] = mapped_column(Float)
    linf_acc_8: Mapped[float | None] = mapped_column(Float)
    linf_acc_16: Mapped[float | None] = mapped_column(Float)
    pd_acc_8: Mapped[float | None] = mapped_column(Float)
    pd_acc_16: Mapped[float | None] = mapped_column(Float)
    figures: Mapped[dict[str, float]] = mapped_column(JSON)
    count: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[float] = mapped_column(Float)
    records_path: Mapped[str] = mapped_column(String(512))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class LeaderboardEntry(Base):
    """Per-submission summary over the benchmark's test sets, written when it finishes.

    Means over test sets (``macr`` is the mean ACR; for a one-set benchmark it equals its ACR) and
    band means; every sortable metric is an indexed column.
    """

    __tablename__ = "leaderboard_entries"
    __table_args__ = tuple(
        Index(f"ix_leaderboard_entries_benchmark_{column}", "benchmark_id", column)
        for column in (
            "macr", "cert_acc_000", "cert_acc_025", "cert_acc_050", "cert_acc_075",
            "cert_acc_100", "clean_accuracy", "abstain_rate", "pa_median", "band_low",
            "band_mid", "band_high", "finished_at", "base_accuracy", "linf_acc_8",
            "linf_acc_16", "pd_acc_8", "pd_acc_16",
        )
    )  # fmt: skip

    submission_id: Mapped[int] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"), primary_key=True
    )
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id", ondelete="CASCADE"))
    protocol_version: Mapped[str] = mapped_column(String(32))
    macr: Mapped[float] = mapped_column(Float)
    cert_acc_000: Mapped[float] = mapped_column(Float)
    cert_acc_025: Mapped[float] = mapped_column(Float)
    cert_acc_050: Mapped[float] = mapped_column(Float)
    cert_acc_075: Mapped[float] = mapped_column(Float)
    cert_acc_100: Mapped[float] = mapped_column(Float)
    clean_accuracy: Mapped[float] = mapped_column(Float)
    abstain_rate: Mapped[float] = mapped_column(Float)
    pa_median: Mapped[float] = mapped_column(Float)
    # p̂_A distribution (seed 001): means over test sets of each set's quantiles; None for rows
    # written before migration 0003.
    pa_q10: Mapped[float | None] = mapped_column(Float)
    pa_q25: Mapped[float | None] = mapped_column(Float)
    pa_q75: Mapped[float | None] = mapped_column(Float)
    pa_q90: Mapped[float | None] = mapped_column(Float)
    band_low: Mapped[float | None] = mapped_column(Float)
    band_mid: Mapped[float | None] = mapped_column(Float)
    band_high: Mapped[float | None] = mapped_column(Float)
    # Base-classifier robustness (copied from RobustnessResult); None for benchmarks without a
    # robustness stage and rows written before migration 0004.
    base_accuracy: Mapped[float | None] = mapped_column(Float)
    linf_acc_8: Mapped[float | None] = mapped_column(Float)
    linf_acc_16: Mapped[float | None] = mapped_column(Float)
    pd_acc_8: Mapped[float | None] = mapped_column(Float)
    pd_acc_16: Mapped[float | None] = mapped_column(Float)
    test_sets: Mapped[int] = mapped_column(Integer)
    count: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    submission: Mapped[Submission] = relationship()
