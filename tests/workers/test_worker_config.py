"""Worker Celery configuration and the ``certbench worker`` command's refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from certbench.cli.app import app as cli_app
from certbench.cli.app import register_plugins
from models.core.settings import Settings
from models.stages import registry
from workers.config import WorkerSettings, batch_size_for, celery_config, check_timing
from workers.errors import WorkerConfigError
from workers.names import AGGREGATE, CONTROL_QUEUE, QUEUE, VALIDATE


def _settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(data_dir=tmp_path / "data", **values)


def test_redis_worker_acks_late_with_visibility_timeout_above_the_hard_limit(tmp_path):
    settings = _settings(
        tmp_path,
        broker_url="redis://127.0.0.1:6379/0",
        shard_soft_time_limit_seconds=50,
        shard_time_limit_seconds=60,
        visibility_timeout_seconds=90,
        lease_seconds=120,
        heartbeat_seconds=10,
    )
    config = celery_config(settings)
    assert config["broker_url"] == "redis://127.0.0.1:6379/0"
    assert config["broker_transport_options"]["visibility_timeout"] == 90
    assert config["broker_transport_options"]["unacked_restore_interval"] == 9
    assert config["broker_transport_options"]["unacked_restore_throttle"] == 1
    assert config["task_acks_late"] is True
    assert config["task_reject_on_worker_lost"] is True
    assert config["worker_prefetch_multiplier"] == 1
    assert config["worker_concurrency"] == 1
    assert (config["task_soft_time_limit"], config["task_time_limit"]) == (50, 60)
    assert config["task_time_limit"] < config["broker_transport_options"]["visibility_timeout"]
    assert config["accept_content"] == ["json"] and config["task_serializer"] == "json"
    assert config["task_default_queue"] == QUEUE
    assert config["task_routes"][VALIDATE] == {"queue": CONTROL_QUEUE}
    assert config["task_routes"][AGGREGATE] == {"queue": CONTROL_QUEUE}
    assert config["worker_enable_remote_control"] is True


def test_embedded_worker_uses_a_sqlite_message_store_under_the_data_dir(tmp_path):
    settings = _settings(tmp_path)
    config = celery_config(settings)
    assert config["broker_url"].startswith("sqla+sqlite:///")
    store = Path(config["broker_url"].removeprefix("sqla+sqlite:///"))
    assert store.is_absolute() and store.parent == (tmp_path / "data").resolve()
    assert store.name != Path(settings.database_url).name  # never the service database
    assert config["worker_enable_remote_control"] is False  # no fanout on the SQL transport
    assert config["task_acks_late"] is True
    assert "unacked_restore_interval" not in config["broker_transport_options"]


def test_heartbeat_must_fit_twice_into_the_lease(tmp_path):
    with pytest.raises(WorkerConfigError, match="CERTBENCH_HEARTBEAT_SECONDS=60"):
        check_timing(_settings(tmp_path, heartbeat_seconds=60, lease_seconds=100))


def test_defaults_resume_a_killed_worker_before_the_broker_redelivers(tmp_path, caplog):
    """Issue 19 §5: with the production defaults a lost shard is re-sent by the reconciler
    (after the lease), long before Redis re-delivers it, and no warning is needed."""
    settings = _settings(tmp_path, broker_url="redis://127.0.0.1:6379/0")
    check_timing(settings)
    assert settings.lease_seconds < settings.visibility_timeout_seconds
    assert caplog.text == ""


def test_reconcile_interval_must_exceed_two_heartbeats(tmp_path):
    with pytest.raises(WorkerConfigError, match="CERTBENCH_RECONCILE_AFTER_SECONDS=30"):
        check_timing(_settings(tmp_path, heartbeat_seconds=30, reconcile_after_seconds=30))


def test_worker_settings_read_the_environment(monkeypatch):
    monkeypatch.setenv("CERTBENCH_CERTIFY_BATCH_SIZE", "256")
    monkeypatch.setenv("CERTBENCH_CANCEL_CHECK_SECONDS", "0.5")
    knobs = WorkerSettings()
    certify_batch_size = batch_size_for(registry.get("certification"))
    assert (certify_batch_size, knobs.cancel_check_seconds) == (256, 0.5)


def test_a_bad_batch_size_is_refused(monkeypatch):
    monkeypatch.setenv("CERTBENCH_ROBUSTNESS_BATCH_SIZE", "many")
    with pytest.raises(WorkerConfigError, match="CERTBENCH_ROBUSTNESS_BATCH_SIZE='many'"):
        batch_size_for(registry.get("pd_robustness"))
    monkeypatch.delenv("CERTBENCH_ROBUSTNESS_BATCH_SIZE")
    assert batch_size_for(registry.get("pd_robustness")) == 256


@pytest.fixture
def cli(monkeypatch, tmp_path):
    monkeypatch.setenv("CERTBENCH_DATA_DIR", str(tmp_path / "data"))
    for name in ("CERTBENCH_BROKER_URL", "CERTBENCH_DATABASE_URL", "CERTBENCH_WORKER_DEVICE"):
        monkeypatch.delenv(name, raising=False)
    from models.core.settings import get_settings

    get_settings.cache_clear()
    register_plugins(cli_app)
    yield CliRunner()
    get_settings.cache_clear()


def test_worker_without_broker_or_embedded_flag_refuses(cli):
    result = cli.invoke(cli_app, ["worker"])
    assert result.exit_code == 2
    assert "CERTBENCH_BROKER_URL" in result.output and "--embedded" in result.output


def test_embedded_worker_refuses_a_configured_broker(cli, monkeypatch):
    monkeypatch.setenv("CERTBENCH_BROKER_URL", "redis://user:secret@127.0.0.1:6379/0")
    result = cli.invoke(cli_app, ["worker", "--embedded"])
    assert result.exit_code == 2
    assert "CERTBENCH_BROKER_URL" in result.output
    assert "secret" not in result.output


@pytest.mark.parametrize("queues", ["certbench.robustnes", "", " , "])
def test_worker_refuses_unknown_queue_names(cli, queues):
    result = cli.invoke(cli_app, ["worker", "--embedded", "--queues", queues])
    assert result.exit_code == 2
    assert "certbench.robustness" in result.output  # the message lists the real queues


def test_worker_refuses_inconsistent_time_limits(cli, monkeypatch):
    monkeypatch.setenv("CERTBENCH_SHARD_TIME_LIMIT_SECONDS", "9000")
    result = cli.invoke(cli_app, ["worker", "--embedded"])
    assert result.exit_code == 2
    assert "visibility_timeout_seconds" in result.output


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA"
)
def test_worker_refuses_a_gpu_device_on_a_machine_without_one(cli):
    result = cli.invoke(cli_app, ["worker", "--embedded", "--device", "cuda:0"])
    assert result.exit_code == 2
    assert "CUDA is not available" in result.output


def test_worker_refuses_a_device_name_torch_does_not_know(cli):
    result = cli.invoke(cli_app, ["worker", "--embedded", "--device", "gpu-please"])
    assert result.exit_code == 2
    assert "'gpu-please' is not a torch device" in result.output
