"""Where the client finds its server and token (flag, environment, config file, default), the
config file's permissions and round trip, and the typed answers read defensively."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from certbench.client import ClientError, Submission
from certbench.client.config import (
    DEFAULT_SERVER,
    Config,
    config_path,
    load_config,
    resolve,
    save_config,
)

A = "https://a.example.org"
B = "http://127.0.0.1:9000"


def test_server_and_token_precedence():
    config = Config(server=A, tokens={A: "cb_stored_a", B: "cb_stored_b"})
    empty = Config()
    assert resolve(config=empty, env={}).server == DEFAULT_SERVER
    assert resolve(config=empty, env={}).token is None
    stored = resolve(config=config, env={})
    assert (stored.server, stored.token) == (A, "cb_stored_a")
    from_env = resolve(config=config, env={"CERTBENCH_SERVER": B + "/"})
    assert (from_env.server, from_env.token) == (B, "cb_stored_b")
    assert from_env.server_source == "CERTBENCH_SERVER"
    flag = resolve(B, config=config, env={"CERTBENCH_SERVER": A})
    assert (flag.server, flag.server_source) == (B, "--server")
    env_token = resolve(config=config, env={"CERTBENCH_TOKEN": "cb_env"})
    assert (env_token.token, env_token.token_source) == ("cb_env", "CERTBENCH_TOKEN")
    explicit = resolve(token="cb_flag", config=config, env={"CERTBENCH_TOKEN": "cb_env"})
    assert (explicit.token, explicit.token_source) == ("cb_flag", "--token")


def test_a_stored_token_is_never_sent_to_another_server():
    config = Config(server=A, tokens={A: "cb_stored_a"})
    elsewhere = resolve("https://evil.example.org", config=config, env={})
    assert elsewhere.token is None


def test_server_must_be_an_http_url():
    for bad in ("127.0.0.1:8000", "ftp://host", "http://"):
        with pytest.raises(ClientError, match="not an http"):
            resolve(bad, config=Config(), env={})


def test_config_file_is_private_and_round_trips(tmp_path: Path):
    path = config_path({"XDG_CONFIG_HOME": str(tmp_path / "cfg")})
    assert path == tmp_path / "cfg" / "certbench" / "config.toml"
    tricky = 'cb_"quoted"\\back\tslash-ü'
    save_config(Config(server=A, tokens={A: tricky, B: "cb_b"}), path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert load_config(path) == Config(server=A, tokens={A: tricky, B: "cb_b"})
    save_config(Config(server=None, tokens={}), path)
    assert load_config(path) == Config()
    assert [p.name for p in path.parent.iterdir()] == ["config.toml"]


def test_a_broken_config_file_is_named(tmp_path: Path):
    path = tmp_path / "config.toml"
    path.write_text("server = \n")
    with pytest.raises(ClientError, match=str(path)):
        load_config(path)
    path.write_text('server = 3\n[tokens]\n"x" = "y"\n')
    with pytest.raises(ClientError, match="should hold"):
        load_config(path)
    assert load_config(tmp_path / "absent.toml") == Config()


def test_submission_fields_are_read_defensively():
    older = Submission.from_json({"id": 4, "state": "running", "progress": 0.25})
    assert (older.eta_seconds, older.throughput, older.estimate) == (None, None, None)
    assert older.progress == 0.25 and not older.terminal and older.weights is None
    newer = Submission.from_json(
        {
            "id": 5,
            "state": "running",
            "progress": 1.7,
            "eta_seconds": 95.5,
            "throughput": {"samples_per_second": 812.0, "images_per_second": None},
            "estimate": {"forward_passes": 1_600_000, "seconds": None, "basis": "fleet"},
            "something_new": {"nested": True},
        }
    )
    assert newer.progress == 1.0 and newer.eta_seconds == 95.5
    assert newer.throughput is not None and newer.throughput.samples_per_second == 812.0
    assert newer.throughput.images_per_second is None
    assert newer.estimate is not None and newer.estimate.forward_passes == 1_600_000
    assert newer.raw["something_new"] == {"nested": True}
    odd = Submission.from_json({"id": "7", "state": None, "progress": "half", "throughput": 3})
    assert (odd.id, odd.state, odd.progress, odd.throughput) == (0, "unknown", 0.0, None)
