"""One typed settings object shared by the API and the workers.

Both processes read the same environment (prefix ``CERTBENCH_``) so a deployment is configured in
one place: ``CERTBENCH_DATABASE_URL``, ``CERTBENCH_BROKER_URL``, ``CERTBENCH_DATA_DIR``, ... With
nothing set, everything lives under ``./certbench-data`` (SQLite + artifacts) and the broker is the
embedded one, so ``certbench serve`` works on a fresh machine.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

MiB = 1024 * 1024
#: Where ``uv run mkdocs build`` writes the documentation site in a clone (``mkdocs.yml``).
PROJECT_SITE = Path(__file__).resolve().parents[2] / "site"


#: Environment variables a release retired, with what replaced them: set, they would be ignored
#: silently (unknown ``CERTBENCH_*`` variables are), so the settings refuse them by name.
RETIRED_VARIABLES = {
    "CERTBENCH_QUOTA_FORWARD_PASSES_PER_DAY": "CERTBENCH_QUOTA_FLOPS_PER_DAY (the compute quota "
    "counts FLOPs: forward passes × the network's FLOPs per sample; the old default of 5e10 "
    "passes is 2.5e19 FLOPs with a CIFAR ResNet-110)",
}


def _refuse_retired_variables() -> None:
    """Raise naming each retired variable set in the environment and its replacement."""
    found = [f"{name}: use {new}" for name, new in RETIRED_VARIABLES.items() if name in os.environ]
    if found:
        raise ValueError("retired setting(s) in the environment: " + "; ".join(found))


class Settings(BaseSettings):
    """Service configuration; every field can be set as ``CERTBENCH_<FIELD>`` in the environment.

    ``database_url``, ``artifacts_dir`` and ``datasets_dir`` default to places under ``data_dir``,
    ``guide_dir`` to the project's ``site/``; all are filled after validation. ``broker_url``
    None means "embedded broker" (see ``embedded_broker``).
    """

    model_config = SettingsConfigDict(env_prefix="CERTBENCH_", env_file=None, extra="ignore")

    environment: Literal["development", "production", "test"] = Field(
        default="development",
        description="`production` refuses the embedded SQLite database and broker.",
    )
    data_dir: Path = Field(
        default=Path("certbench-data"),
        description="Where the SQLite database and, by default, artifacts and data sets live; "
        "`cache/` keeps what the API builds once per deployment (the pages' charting script).",
    )
    database_url: str = Field(
        default="",
        description="SQLAlchemy URL; empty: SQLite at `<data_dir>/certbench.db`. "
        "`postgresql://` gets the psycopg driver.",
    )
    broker_url: str | None = Field(
        default=None,
        description="Celery broker (`redis://host:6379/0`); unset: the embedded broker, and "
        "`serve` starts an embedded worker.",
    )
    # Timeouts on every network call to the database and the broker: across hosts a link can go
    # silent (a partition drops packets without closing anything), and without them a request,
    # a heartbeat or a consumer would wait out the kernel's TCP retries (about 15 minutes).
    database_connect_timeout_seconds: int = Field(
        default=5,
        gt=0,
        description="PostgreSQL: seconds to open a connection before the attempt fails.",
    )
    database_tcp_timeout_seconds: int = Field(
        default=10,
        gt=0,
        description="PostgreSQL: a connection whose sent data stays unacknowledged this long, or "
        "that answers no keepalive for about as long, is closed (`tcp_user_timeout`, TCP "
        "keepalives), at both ends: a query on a link that went silent fails instead of "
        "hanging, and the server ends the session of a client that went silent mid-transaction "
        "(its row locks released) instead of keeping it until the link heals.",
    )
    database_statement_timeout_seconds: int = Field(
        default=120,
        ge=0,
        description="PostgreSQL: a statement of the service (not a migration) running longer is "
        "cancelled by the server; 0: no limit.",
    )
    broker_timeout_seconds: int = Field(
        default=10,
        gt=0,
        description="Redis: seconds to connect and to wait for a command's reply; a consumer "
        "whose blocking read got no reply for about this long reconnects.",
    )
    # Unset (None or empty) is filled from data_dir before validation, so readers get a Path.
    artifacts_dir: Path = Field(
        default=None,
        validate_default=True,
        description="Weights, records and figures; default `<data_dir>/artifacts`.",
    )
    datasets_dir: Path | None = Field(
        default=None,
        description="Folders a definition names by a relative `folder`, local copies of Hub "
        "data sets (`<datasets_dir>/<org>/<name>`, written by `certbench datasets fetch`) and the "
        "data sets the service generates (the demo's); default `<data_dir>/datasets`.",
    )
    anchors_dir: Path | None = Field(
        default=None,
        description="PD anchor banks (`<anchors_dir>/<name>.safetensors`); default "
        "`<artifacts_dir>/anchors`.",
    )
    guide_dir: Path | None = Field(
        default=None,
        description="The built documentation site `certbench serve` serves at `/guide`; "
        "default the project's `site/` (`uv run mkdocs build`). Read on every request: served "
        "as soon as it is built; until then `/guide` is a page saying how to build it.",
    )

    # Intake limits: checked before anything is written.
    max_weights_bytes: int = Field(
        default=256 * MiB, gt=0, description="Largest weights upload (bytes)."
    )
    max_manifest_bytes: int = Field(
        default=64 * 1024, gt=0, description="Largest manifest upload (bytes)."
    )

    # Quotas per user and UTC day. Rejected/failed submissions are counted against their own
    # budget, so a user fixing a broken upload is not locked out of real runs (and vice versa).
    quota_submissions_per_day: int = Field(
        default=20, ge=0, description="Submissions per user and UTC day."
    )
    quota_failed_per_day: int = Field(
        default=20, ge=0, description="Rejected or failed submissions per user and UTC day."
    )
    quota_concurrent: int = Field(
        default=2, ge=0, description="Submissions of one user queued or running at once."
    )
    # The default, 2.5e19 FLOPs, is generous but finite: five runs of the largest packaged
    # benchmark (CIFAR-10-F, 9.6e9 forward passes at n = 100,000) with a CIFAR ResNet-110
    # (5.06e8 FLOPs per sample, counted by certbench.nets.cost), about 250 of packaged CIFAR-10.
    quota_flops_per_day: int = Field(
        default=25_000_000_000_000_000_000,
        ge=0,
        description="Estimated FLOPs (forward passes × the network's FLOPs per sample) a user "
        "may ask for per 24 hours (`models.submissions.compute_quota`; admins are exempt).",
    )
    refused_uploads_per_window: int = Field(
        default=30,
        ge=0,
        description="Refused uploads (bad manifest, weights that do not fit, swapped parts, "
        "oversized parts) a user may make within `refused_uploads_window_seconds` before further "
        "uploads answer 429 with Retry-After; they create no submission, so no quota counts them. "
        "0 turns the limit off; admins are exempt.",
    )
    refused_uploads_window_seconds: int = Field(
        default=600, gt=0, description="The window of `refused_uploads_per_window`, in seconds."
    )

    # Worker leases and the watchdog's reconciler.
    lease_seconds: int = Field(
        default=900,
        gt=0,
        description="A shard or validation whose heartbeat is older than this is taken as lost "
        "with its worker and sent again.",
    )
    max_shard_attempts: int = Field(
        default=3,
        gt=0,
        description="Lost workers tolerated per shard; then the submission fails with their "
        "history.",
    )
    reconcile_after_seconds: int = Field(
        default=600,
        gt=0,
        description="Work the database says exists but nothing ran for this long (a message the "
        "broker lost, an aggregate that never came, an upload never validated) is sent again.",
    )
    heartbeat_seconds: int = Field(
        default=30, gt=0, description="How often a worker renews the lease of what it computes."
    )
    shard_size: int = Field(
        default=100,
        gt=0,
        description="Images per certification shard; every worker must use the same value.",
    )
    robustness_shard_size: int | None = Field(
        default=None,
        gt=0,
        description="Images per robustness (attack) shard; unset: `shard_size`. Every worker "
        "must use the same value.",
    )
    worker_device: str | None = Field(
        default=None,
        description="Torch device of `certbench worker` (`cuda:1`, `cpu`); unset: the first "
        "GPU, else the CPU.",
    )
    # Celery limits: the Redis visibility timeout must be longer than the longest shard or Redis
    # redelivers a task that is still running.
    shard_soft_time_limit_seconds: int = Field(
        default=3000, gt=0, description="A shard running this long is soft-interrupted."
    )
    shard_time_limit_seconds: int = Field(
        default=3600, gt=0, description="A shard running this long is killed."
    )
    visibility_timeout_seconds: int = Field(
        default=7200,
        gt=0,
        description="Redis visibility timeout; must exceed `shard_time_limit_seconds`.",
    )
    watchdog_interval_seconds: int = Field(
        default=60, gt=0, description="How often the watchdog looks for lost or stalled work."
    )
    partial_upload_grace_seconds: int = Field(
        default=3600,
        gt=0,
        description="Partial weights files (uploads or writes cut off by a killed process) "
        "untouched this long are removed at start-up and by the watchdog.",
    )

    require_local_data: bool = Field(
        default=True,
        description='Show benchmarks whose data this machine lacks as "data not available '
        'here" and refuse their submissions (422 `dataset_unavailable`). Turn off where workers '
        "on other machines hold data the API host lacks.",
    )
    demo_references: bool = Field(
        default=True,
        description="On start, `serve` submits the demo benchmark's packaged reference entries "
        "(once).",
    )

    host: str = Field(default="127.0.0.1", description="Address `certbench serve` listens on.")
    port: int = Field(default=8000, gt=0, lt=65536, description="Port `certbench serve` uses.")
    api_workers: int | None = Field(
        default=None,
        gt=0,
        description="API processes of `certbench serve`; unset: the CPUs available, at most 8.",
    )
    keep_alive_seconds: int = Field(
        default=75,
        gt=0,
        description="Seconds `certbench serve` keeps an idle HTTP connection open. Keep it longer "
        "than the idle timeout of the load balancer or clients in front (60 s is common): the "
        "side that closes an idle connection first must be theirs, or a request sent as the "
        "server closes it gets no answer (uvicorn's 5 s made that happen on a slow, lossy link).",
    )

    @field_validator(
        "broker_url",
        "datasets_dir",
        "anchors_dir",
        "guide_dir",
        "worker_device",
        "robustness_shard_size",
        "api_workers",
        mode="before",
    )
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        """An empty env var (``CERTBENCH_BROKER_URL=``) means "not configured"."""
        return None if value == "" else value

    @field_validator("artifacts_dir", mode="before")
    @classmethod
    def _artifacts_under_data_dir(cls, value: object, info: ValidationInfo) -> object:
        """Unset (None, or an empty env var) means ``<data_dir>/artifacts``."""
        if value is not None and value != "":
            return value
        if "data_dir" not in info.data:
            raise ValueError("artifacts_dir defaults to <data_dir>/artifacts: set a valid data_dir")
        return info.data["data_dir"] / "artifacts"

    @model_validator(mode="after")
    def _fill_defaults(self) -> Settings:
        """Derive the SQLite URL, anchors and datasets dirs from data_dir (the artifacts dir is
        filled before validation); resolve every dir; pick the psycopg driver."""
        if not self.database_url:
            self.database_url = f"sqlite:///{(self.data_dir / 'certbench.db').resolve()}"
        for prefix in ("postgresql://", "postgres://"):
            if self.database_url.startswith(prefix):
                self.database_url = "postgresql+psycopg://" + self.database_url[len(prefix) :]
        self.artifacts_dir = self.artifacts_dir.resolve()
        self.anchors_dir = (self.anchors_dir or self.artifacts_dir / "anchors").resolve()
        self.datasets_dir = (self.datasets_dir or self.data_dir / "datasets").resolve()
        self.guide_dir = (self.guide_dir or PROJECT_SITE).resolve()
        if self.environment == "production":
            self._refuse_embedded_defaults()
        _refuse_retired_variables()
        if not (
            self.shard_soft_time_limit_seconds
            < self.shard_time_limit_seconds
            < self.visibility_timeout_seconds
        ):
            raise ValueError(
                "need shard_soft_time_limit_seconds < shard_time_limit_seconds < "
                f"visibility_timeout_seconds, got {self.shard_soft_time_limit_seconds}, "
                f"{self.shard_time_limit_seconds}, {self.visibility_timeout_seconds}: raise "
                "CERTBENCH_VISIBILITY_TIMEOUT_SECONDS or lower the shard limits"
            )
        return self

    def _refuse_embedded_defaults(self) -> None:
        """Production must not silently fall back to the single-machine defaults."""
        missing = []
        if self.database_url.startswith("sqlite"):
            missing.append("CERTBENCH_DATABASE_URL (a postgresql:// URL)")
        if self.broker_url is None:
            missing.append("CERTBENCH_BROKER_URL (e.g. redis://host:6379/0)")
        if missing:
            raise ValueError(
                f"environment=production requires {' and '.join(missing)}; set them, or use "
                "CERTBENCH_ENVIRONMENT=development for the embedded SQLite/broker defaults"
            )

    @property
    def embedded_broker(self) -> bool:
        """True when no broker is configured: serve starts an embedded worker."""
        return self.broker_url is None

    @property
    def is_sqlite(self) -> bool:
        """SQLite needs a few connection pragmas and a single writer at a time."""
        return self.database_url.startswith("sqlite")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Settings read once per process from the environment (tests build their own ``Settings``)."""
    return Settings()
