"""Settings: env prefix, derived defaults, driver rewrite, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from models.core.queue import CONTROL_QUEUE, TASK_VALIDATE, celery_config
from models.core.settings import Settings


def test_defaults_live_under_data_dir(tmp_path: Path):
    settings = Settings(data_dir=tmp_path)
    assert settings.database_url == f"sqlite:///{tmp_path.resolve() / 'certbench.db'}"
    assert settings.artifacts_dir == tmp_path.resolve() / "artifacts"
    assert settings.embedded_broker and settings.is_sqlite


def test_datasets_dir_defaults_under_data_dir_as_the_fetch_command_assumes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    from certbench.data.fetch import default_datasets_dir

    monkeypatch.delenv("CERTBENCH_DATASETS_DIR", raising=False)
    monkeypatch.setenv("CERTBENCH_DATA_DIR", str(tmp_path / "d"))
    assert Settings().datasets_dir == default_datasets_dir() == tmp_path / "d" / "datasets"
    monkeypatch.setenv("CERTBENCH_DATASETS_DIR", str(tmp_path / "x"))
    assert Settings().datasets_dir == default_datasets_dir() == tmp_path / "x"
    assert Settings().require_local_data and Settings().demo_references


def test_environment_prefix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("CERTBENCH_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("CERTBENCH_DATABASE_URL", "postgresql://u:p@db:5432/certbench")
    monkeypatch.setenv("CERTBENCH_BROKER_URL", "redis://redis:6379/0")
    monkeypatch.setenv("CERTBENCH_QUOTA_CONCURRENT", "7")
    settings = Settings()
    assert settings.database_url == "postgresql+psycopg://u:p@db:5432/certbench"
    assert settings.broker_url == "redis://redis:6379/0" and not settings.embedded_broker
    assert settings.quota_concurrent == 7


def test_empty_broker_env_means_embedded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("CERTBENCH_BROKER_URL", "")
    assert Settings(data_dir=tmp_path).embedded_broker


def test_production_refuses_embedded_defaults(tmp_path: Path):
    with pytest.raises(ValidationError, match=r"CERTBENCH_DATABASE_URL .*CERTBENCH_BROKER_URL"):
        Settings(data_dir=tmp_path, environment="production")
    settings = Settings(
        data_dir=tmp_path,
        environment="production",
        database_url="postgresql://db/x",
        broker_url="redis://r:6379/0",
    )
    assert settings.environment == "production"


def test_time_limits_must_nest(tmp_path: Path):
    with pytest.raises(ValidationError, match="visibility_timeout_seconds"):
        Settings(data_dir=tmp_path, shard_time_limit_seconds=9000)


def test_celery_config_embedded_and_redis(tmp_path: Path):
    embedded = celery_config(Settings(data_dir=tmp_path))
    assert embedded["broker_url"] == f"sqla+sqlite:///{tmp_path.resolve() / 'broker.sqlite'}"
    assert embedded["task_routes"][TASK_VALIDATE] == {"queue": CONTROL_QUEUE}
    assert embedded["accept_content"] == ["json"]
    redis = celery_config(
        Settings(data_dir=tmp_path, broker_url="redis://x:6379/0", visibility_timeout_seconds=9999)
    )
    assert redis["broker_url"] == "redis://x:6379/0"
    options = redis["broker_transport_options"]
    assert options["visibility_timeout"] == 9999
    assert options["socket_timeout"] == Settings.model_fields["broker_timeout_seconds"].default
