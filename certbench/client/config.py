"""Where the client finds its server and token: flags, then the environment, then the config
file that ``certbench login`` writes.

The config file (TOML, ``$XDG_CONFIG_HOME/certbench/config.toml``, or ``CERTBENCH_CONFIG``)
keeps one token *per server*::

    server = "https://certbench.example.org"

    [tokens]
    "https://certbench.example.org" = "cb_..."

so a token is only ever sent to the server it was issued by: pointing ``--server`` at another
host never leaks the stored one. The file holds a secret, so it is written with mode 0600
(folder 0700), atomically.
"""

from __future__ import annotations

import json
import os
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from certbench.client.errors import ClientError

DEFAULT_SERVER = "http://127.0.0.1:8000"
SERVER_ENV = "CERTBENCH_SERVER"
TOKEN_ENV = "CERTBENCH_TOKEN"
CONFIG_ENV = "CERTBENCH_CONFIG"


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """``CERTBENCH_CONFIG``, else the user config dir's ``certbench/config.toml``."""
    env = os.environ if env is None else env
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]).expanduser()
    if env.get("XDG_CONFIG_HOME"):
        base = Path(env["XDG_CONFIG_HOME"])
    elif os.name == "nt" and env.get("APPDATA"):
        base = Path(env["APPDATA"])
    else:
        base = Path.home() / ".config"
    return base / "certbench" / "config.toml"


def normalize_server(url: str) -> str:
    """``url`` without a trailing slash; refuses anything but an http(s) URL with a host."""
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ClientError(
            f"server {url!r} is not an http(s) URL; give one such as {DEFAULT_SERVER} or "
            "https://certbench.example.org"
        )
    return url


@dataclass
class Config:
    """The stored default server and one token per server."""

    server: str | None = None
    tokens: dict[str, str] = field(default_factory=dict)


def load_config(path: Path | None = None) -> Config:
    """The config file's contents (an empty Config when there is none). Raises ClientError for
    a file that is not valid TOML or not of the expected shape."""
    path = path or config_path()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Config()
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ClientError(
            f"cannot read the certbench config file {path}: {err}; fix or delete it and run "
            "`certbench login` again"
        ) from err
    server = data.get("server")
    tokens = data.get("tokens", {})
    if not (server is None or isinstance(server, str)) or not isinstance(tokens, dict):
        raise ClientError(
            f'the certbench config file {path} should hold `server = "URL"` and a [tokens] '
            "table of URL = token; fix or delete it and run `certbench login` again"
        )
    return Config(
        server=server,
        tokens={str(k): v for k, v in tokens.items() if isinstance(v, str)},
    )


def save_config(config: Config, path: Path | None = None) -> Path:
    """Write ``config`` (mode 0600, folder 0700, atomic). Returns the path written."""
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    lines = ["# written by `certbench login`: one API token per server; keep it private"]
    if config.server is not None:
        lines.append(f"server = {_toml_string(config.server)}")
    lines += ["", "[tokens]"]
    lines += [f"{_toml_string(k)} = {_toml_string(v)}" for k, v in sorted(config.tokens.items())]
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _toml_string(value: str) -> str:
    """A TOML basic string: JSON's escapes are a subset of TOML's for non-surrogate text."""
    return json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True)
class Connection:
    """The server to talk to and the token to send it, with where each came from."""

    server: str
    token: str | None
    server_source: str
    token_source: str | None


def resolve_server(
    server: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    config: Config | None = None,
) -> str:
    """``server``, else CERTBENCH_SERVER, else the config file's, else DEFAULT_SERVER."""
    return _server(server, os.environ if env is None else env, config)[0]


def _server(
    server: str | None, env: Mapping[str, str], config: Config | None
) -> tuple[str, str, Config]:
    stored = config if config is not None else load_config(config_path(env))
    if server:
        chosen, source = server, "--server"
    elif env.get(SERVER_ENV):
        chosen, source = env[SERVER_ENV], SERVER_ENV
    elif stored.server:
        chosen, source = stored.server, str(config_path(env))
    else:
        chosen, source = DEFAULT_SERVER, "default"
    return normalize_server(chosen), source, stored


def resolve(
    server: str | None = None,
    token: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    config: Config | None = None,
) -> Connection:
    """Server as :func:`resolve_server`. Token: ``token``, else CERTBENCH_TOKEN, else the
    config file's token *for that server* (never one stored for another server)."""
    env = os.environ if env is None else env
    chosen, server_source, stored = _server(server, env, config)
    if token:
        return Connection(chosen, token, server_source, "--token")
    if env.get(TOKEN_ENV):
        return Connection(chosen, env[TOKEN_ENV], server_source, TOKEN_ENV)
    if chosen in stored.tokens:
        return Connection(chosen, stored.tokens[chosen], server_source, str(config_path(env)))
    return Connection(chosen, None, server_source, None)
