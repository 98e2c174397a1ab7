"""The model zoo from Python: published leaderboard entries as ready ``nn.Module`` objects.

    from certbench.client.zoo import load_model

    model = load_model("cifar10", 12, server="https://certbench.example.org")
    logits = model(images)  # images in [0, 1], shape (N, 3, 32, 32); eval mode

``entry`` is the entry's submission id; ``benchmark`` is checked against the entry's, so a wrong
pair fails instead of loading a model trained for other data. The weights are downloaded once
into a cache (``CERTBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/certbench``, else
``~/.cache/certbench``), stored by their SHA-256, and verified against the hash the server
published every time they are used: a corrupted download or cache file is refused (and a
corrupted cache file fetched again). The model is built exactly as the service evaluates it
(``certbench.nets.loading.load_model``: safetensors only, strict state-dict loading, the manifest's
normalisation layer in front of the network, a checked forward pass, eval mode). Pickle,
``torch.load`` and TorchScript are never used.

The server is asked every time (its answer carries the hash to verify and says whether the
weights are still published); anonymous access is enough for published weights, and a token
(``CERTBENCH_TOKEN`` or ``certbench login``) lets an owner load their own unpublished ones.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from certbench.client.errors import ClientError
from certbench.client.rest import Client, connect
from certbench.client.types import EntryWeights
from certbench.errors import CertbenchError

if TYPE_CHECKING:
    import torch
    from torch import nn

CACHE_ENV = "CERTBENCH_CACHE_DIR"
#: (bytes done, bytes total) of the weights download.
ByteProgress = Callable[[int, int], None]


class ZooError(CertbenchError):
    """An entry that cannot be loaded as asked (wrong benchmark, unusable manifest)."""


@dataclass(frozen=True)
class ZooFiles:
    """A downloaded entry: its metadata, the verified weights file and its manifest file."""

    entry: EntryWeights
    weights: Path
    manifest: Path
    downloaded: bool


def cache_dir() -> Path:
    """Where downloaded entries are kept."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "certbench"


def sha256_file(path: Path) -> str:
    """SHA-256 (hex) of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1024 * 1024), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download(
    entry: int,
    *,
    benchmark: str | None = None,
    out: Path | None = None,
    server: str | None = None,
    token: str | None = None,
    client: Client | None = None,
    on_progress: ByteProgress | None = None,
) -> ZooFiles:
    """Fetch an entry's weights and manifest, verified by SHA-256.

    ``out``: the folder to write ``<benchmark>-entry-<id>.safetensors`` and ``.json`` into
    (default: the cache, where weights are stored by hash and shared between entries). A weights
    file already there with the right hash is not downloaded again; one with another hash is
    replaced. Raises ClientError (PermissionDenied for unpublished weights, NotFound,
    HashMismatchError, ServerUnreachable) or ZooError (``benchmark`` is not the entry's).
    """
    if client is None:
        with connect(server, token) as own:
            return download(
                entry, benchmark=benchmark, out=out, client=own, on_progress=on_progress
            )
    info = client.entry(entry)
    if benchmark is not None and info.benchmark != benchmark:
        raise ZooError(
            f"entry {entry} ({info.model_name!r}) is an entry of benchmark {info.benchmark!r}, "
            f"not {benchmark!r}; call load_model({info.benchmark!r}, {entry})"
        )
    if not re.fullmatch(r"[0-9a-f]{64}", info.sha256):
        raise ClientError(f"the server gave entry {entry} no valid SHA-256 ({info.sha256!r})")
    if out is None:
        root = cache_dir() / "zoo"
        weights = root / "weights" / f"{info.sha256}.safetensors"
        manifest = root / "entries" / _server_key(client.server) / f"{entry}.json"
    else:
        stem = f"{info.benchmark}-entry-{entry}"
        weights, manifest = out / f"{stem}.safetensors", out / f"{stem}.json"
    downloaded = False
    if not (weights.is_file() and sha256_file(weights) == info.sha256):
        client.download_weights(entry, weights, sha256=info.sha256, on_progress=on_progress)
        downloaded = True
    _write_json(manifest, dict(info.manifest))
    return ZooFiles(entry=info, weights=weights, manifest=manifest, downloaded=downloaded)


def load_model(
    benchmark: str,
    entry: int,
    *,
    server: str | None = None,
    token: str | None = None,
    device: torch.device | str | None = None,
    client: Client | None = None,
) -> nn.Module:
    """The published model of ``entry`` (a submission id) on ``benchmark``, ready to use: the
    manifest's normalisation in front of the network, in eval mode, on ``device`` (CPU by
    default). Inputs are images in [0, 1] of the manifest's input size.

    ``server``/``token`` default as for the CLI: CERTBENCH_SERVER / CERTBENCH_TOKEN, then the
    config file of ``certbench login``. Raises ClientError, ZooError, or the
    ``certbench.errors.ModelLoadError`` of a model this version of certbench cannot build.
    """
    from certbench.nets import load_manifest
    from certbench.nets import load_model as build

    files = download(entry, benchmark=benchmark, server=server, token=token, client=client)
    manifest = load_manifest(files.manifest)
    if manifest.benchmark != benchmark:
        raise ZooError(
            f"the manifest of entry {entry} names benchmark {manifest.benchmark!r}, "
            f"not {benchmark!r}"
        )
    return build(files.weights, manifest, device=device)


def _server_key(server: str) -> str:
    """A folder name for a server URL (entries of different servers never mix)."""
    parts = urlsplit(server)
    name = f"{parts.hostname or 'server'}_{parts.port or parts.scheme}{parts.path}"
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def _write_json(path: Path, document: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
