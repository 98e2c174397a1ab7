"""docker-compose.yml and the Dockerfile agree with the settings and commands the code reads."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from typer.testing import CliRunner

from certbench.cli.app import app as cli_app
from certbench.cli.app import register_plugins
from models.core.settings import Settings
from workers.config import WorkerSettings, check_timing

ROOT = Path(__file__).resolve().parents[2]
CERTBENCH_SERVICES = ("migrate", "api", "worker")
_VARIABLE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def _interpolate(value: str) -> str:
    """Compose's ``${NAME:-default}`` with nothing set in the environment."""
    return _VARIABLE.sub(lambda m: m.group(2) or "", value)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _env(compose: dict[str, Any], service: str) -> dict[str, str]:
    raw = compose["services"][service].get("environment", {})
    return {k: _interpolate(str(v)) for k, v in raw.items()}


def _settings(env: dict[str, str]) -> Settings:
    fields = {k.removeprefix("CERTBENCH_").lower(): v for k, v in env.items()}
    return Settings(**{k: v for k, v in fields.items() if k in Settings.model_fields})


def test_services_are_the_ones_the_deployment_needs(compose):
    assert set(compose["services"]) == {"postgres", "redis", "migrate", "api", "worker"}


@pytest.mark.parametrize("service", CERTBENCH_SERVICES)
def test_every_variable_is_a_setting_the_code_reads(compose, service):
    known = set(Settings.model_fields) | set(WorkerSettings.model_fields)
    env = _env(compose, service)
    assert env, f"{service} has no environment"
    for name in env:
        assert name.startswith("CERTBENCH_"), name
        assert name.removeprefix("CERTBENCH_").lower() in known, f"{service}: {name} is unused"


@pytest.mark.parametrize("service", CERTBENCH_SERVICES)
def test_settings_validate_and_point_at_the_compose_servers(compose, service):
    env = _env(compose, service)
    settings = _settings(env)
    assert settings.environment == "production"
    database = urlsplit(settings.database_url)
    postgres = _env(compose, "postgres")
    assert database.scheme == "postgresql+psycopg"
    assert (database.hostname, database.port) == ("postgres", 5432)
    assert database.username == postgres["POSTGRES_USER"]
    assert database.password == postgres["POSTGRES_PASSWORD"]
    assert database.path.lstrip("/") == postgres["POSTGRES_DB"]
    broker = urlsplit(settings.broker_url)
    assert (broker.scheme, broker.hostname, broker.port) == ("redis", "redis", 6379)
    assert "redis" in compose["services"]
    assert str(settings.data_dir) == "/data"


def test_timings_let_a_lost_shard_resume_before_the_watchdog_fails_it(compose):
    settings = _settings(_env(compose, "worker"))
    check_timing(settings)
    assert settings.shard_time_limit_seconds < settings.visibility_timeout_seconds
    assert settings.visibility_timeout_seconds < settings.lease_seconds
    assert 2 * settings.heartbeat_seconds <= settings.lease_seconds


def test_api_port_and_host_match_the_published_port(compose):
    api = compose["services"]["api"]
    settings = _settings(_env(compose, "api"))
    published = [str(p) for p in api["ports"]]
    assert published == [f"{settings.port}:{settings.port}"]
    assert settings.host == "0.0.0.0"
    assert f"EXPOSE {settings.port}" in (ROOT / "Dockerfile").read_text()
    assert api["command"][:2] == ["certbench", "serve"] and "--no-worker" in api["command"]
    assert str(settings.port) in " ".join(api["healthcheck"]["test"])


def test_worker_reserves_a_gpu_and_uses_it(compose):
    worker = compose["services"]["worker"]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert _env(compose, "worker")["CERTBENCH_WORKER_DEVICE"] == "cuda"
    assert worker["command"][:2] == ["certbench", "worker"]
    assert "--embedded" not in worker["command"]


def test_migration_runs_first_and_api_and_workers_share_the_data_volume(compose):
    services = compose["services"]
    assert services["migrate"]["command"][:3] == ["certbench", "db", "upgrade"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("api", "worker"):
        depends = services[name]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully"
        assert depends["redis"]["condition"] == "service_healthy"
    data = _settings(_env(compose, "api")).data_dir
    mounts = {name: set(services[name]["volumes"]) for name in ("api", "worker")}
    assert mounts["api"] == mounts["worker"] == {f"certbench-data:{data}"}
    assert "certbench-data" in compose["volumes"]


def test_compose_commands_exist_in_the_cli(compose):
    register_plugins(cli_app)
    runner = CliRunner()
    for name in CERTBENCH_SERVICES:
        command = compose["services"][name]["command"]
        words = [w for w in command[1:] if not w.startswith("-")]
        path = words[:2] if words[0] == "db" else words[:1]
        result = runner.invoke(cli_app, [*path, "--help"])
        assert result.exit_code == 0, (
            f"{name}: `certbench {' '.join(path)}` missing: {result.output}"
        )


def test_dockerfile_uses_uv_python_311_and_a_non_root_user():
    text = (ROOT / "Dockerfile").read_text()
    assert text.startswith("# syntax=docker/dockerfile:")
    assert re.findall(r"^FROM python:3\.11\S*", text, flags=re.M)
    assert "uv sync --frozen --no-dev" in text
    users = re.findall(r"^USER (\S+)", text, flags=re.M)
    assert users and users[-1] not in {"root", "0"}
    assert "CERTBENCH_DATA_DIR=/data" in text
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".git", "tests"} <= set(ignored)
