"""Hugging Face Hub layout shared by every dataset generator (DESIGN.md §5).

A benchmark folder holds one *config* per test set, each with one ``test`` split stored as one
parquet shard, plus a README.md whose YAML ``configs:`` block lets
``datasets.load_dataset(folder_or_repo, config, split="test")`` and the Hub viewer find them::

    OUT/README.md                                   dataset card (YAML configs + text + figures)
    OUT/images/*.png                                card figures
    OUT/data/<config>/test-00000-of-00001.parquet   image (PNG), label (ClassLabel), metadata...
    OUT/data/<config>/checksum.json                 sha256 + row count + generation metadata

Writer contract (used by cifar_f and the corruption generators):

- ``write_config`` writes the shard to a temporary file, renames it into place, then writes
  ``checksum.json`` the same way. The checksum file is the commit marker: a crash at any point
  leaves a config that ``config_complete`` reports as incomplete, never a half-written set that
  looks complete.
- ``config_complete(out_dir, config, metadata=...)`` re-hashes the shard and compares the
  recorded generation metadata, so resumed runs skip only verified sets made with the same
  parameters.
- ``write_card`` writes README.md atomically from a ``huggingface_hub.DatasetCard``;
  ``build_card`` assembles one with the ``configs:`` block for a list of config names.

Publishing (``plan_publish``/``publish``) lives here too because it is the other half of the
same layout: it uploads exactly these files and nothing else.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from huggingface_hub import CommitOperationAdd, DatasetCard, DatasetCardData, HfApi
from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled
from huggingface_hub.hf_api import RepoFile
from PIL import Image

from certbench.errors import GeneratorError, PublishError
from certbench.provenance import find_local_paths

SPLIT = "test"
SHARD_NAME = f"{SPLIT}-00000-of-00001.parquet"
CHECKSUM_NAME = "checksum.json"
LAYOUT_VERSION = 1
# Rows per parquet row group: the Hub viewer pages through image datasets by row group, and
# `datasets` itself writes image datasets in groups of 100 rows.
ROW_GROUP_SIZE = 100
# zlib level of the PNG pixel stream (Pillow's compress_level).
PNG_COMPRESS_LEVEL = 1
_CONFIG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_RESERVED_COLUMNS = ("image", "label", "coarse_label", "source_index")


@dataclass
class GenerationReport:
    """What one generation or import run wrote into a Hub-layout folder (for summaries)."""

    out_dir: Path
    written: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    images_written: int = 0
    seconds: float = 0.0


# --------------------------------------------------------------------------------------------
# paths and names


def validate_config_name(config: str) -> str:
    """Config names become folder names and YAML keys: letters, digits, ``_``/``-``, no dots."""
    if not _CONFIG_RE.match(config):
        raise GeneratorError(
            f"config={config!r} is not a valid config name: use letters, digits, '_' or '-' "
            "(no dots, at most 64 characters), e.g. 'fc05_a2_s3' or 'a0p5'."
        )
    return config


def config_dir(out_dir: str | Path, config: str) -> Path:
    """Folder of one config's split files."""
    return Path(out_dir) / "data" / validate_config_name(config)


def shard_path(out_dir: str | Path, config: str) -> Path:
    """The single parquet shard of a config's ``test`` split."""
    return config_dir(out_dir, config) / SHARD_NAME


def checksum_path(out_dir: str | Path, config: str) -> Path:
    """The commit marker written after the shard (see module docstring)."""
    return config_dir(out_dir, config) / CHECKSUM_NAME


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, streamed."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write via ``write(tmp)`` in the target folder, fsync, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------
# images and features


def encode_png(images: np.ndarray, *, level: int = PNG_COMPRESS_LEVEL) -> list[bytes]:
    """Encode ``(N, H, W, 3)`` uint8 images as 8-bit RGB PNGs with Pillow.

    ``level`` is zlib's level for the pixel stream: CIFAR-F images are noise-like, so deflate
    saves only 0-8 % of the bytes; level 1 keeps most of that at a fraction of the cost.
    """
    _check_images(images)
    return [_png_bytes(image, level) for image in images]


def _png_bytes(image: np.ndarray, level: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image, mode="RGB").save(buffer, format="PNG", compress_level=level)
    return buffer.getvalue()


def _check_images(images: np.ndarray) -> None:
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8:
        got = getattr(images, "dtype", type(images).__name__)
        raise GeneratorError(f"images must be a uint8 numpy array (N, H, W, 3), got {got}.")
    if images.ndim != 4 or images.shape[-1] != 3:
        raise GeneratorError(
            f"images must have shape (N, H, W, 3) (channels last), got {images.shape}; "
            "transpose (N, 3, H, W) tensors with .permute(0, 2, 3, 1)."
        )


def _value_type(name: str, values: np.ndarray) -> datasets.Value:
    kind = values.dtype.kind
    if kind in "iu":
        return datasets.Value(str(values.dtype))
    if kind == "f":
        return datasets.Value("float64" if values.dtype == np.float64 else "float32")
    if kind == "b":
        return datasets.Value("bool")
    if kind in "UO":
        return datasets.Value("string")
    raise GeneratorError(
        f"columns[{name!r}] has dtype {values.dtype}, which the Hub layout cannot store; "
        "use integers, floats, booleans or strings."
    )


def build_features(
    class_names: Sequence[str],
    columns: Mapping[str, np.ndarray],
    coarse_class_names: Sequence[str] | None = None,
) -> datasets.Features:
    """Features in column order: image, label, [coarse_label], metadata columns, source_index."""
    spec: dict[str, Any] = {
        "image": datasets.Image(),
        "label": datasets.ClassLabel(names=list(class_names)),
    }
    if coarse_class_names is not None:
        spec["coarse_label"] = datasets.ClassLabel(names=list(coarse_class_names))
    for name, values in columns.items():
        spec[name] = _value_type(name, np.asarray(values))
    spec["source_index"] = datasets.Value("int64")
    return datasets.Features(spec)


def _check_labels(name: str, labels: np.ndarray, n: int, names: Sequence[str]) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.shape != (n,) or labels.dtype.kind not in "iu":
        raise GeneratorError(
            f"{name} must be an integer array of shape ({n},), got {labels.dtype} {labels.shape}."
        )
    if n and (labels.min() < 0 or labels.max() >= len(names)):
        raise GeneratorError(
            f"{name} range [{labels.min()}, {labels.max()}] does not fit the {len(names)} class "
            f"names; pass the class names of the source dataset."
        )
    return labels.astype(np.int64)


def _build_table(
    images: np.ndarray | Sequence[bytes],
    labels: np.ndarray,
    class_names: Sequence[str],
    columns: Mapping[str, np.ndarray],
    source_index: np.ndarray,
    coarse_labels: np.ndarray | None,
    coarse_class_names: Sequence[str] | None,
) -> pa.Table:
    png = encode_png(images) if isinstance(images, np.ndarray) else list(images)
    n = len(png)
    if any(name in _RESERVED_COLUMNS for name in columns):
        raise GeneratorError(
            f"columns may not use the reserved names {_RESERVED_COLUMNS}; got {sorted(columns)}."
        )
    if (coarse_labels is None) != (coarse_class_names is None):
        raise GeneratorError("coarse_labels and coarse_class_names must be given together.")
    features = build_features(class_names, columns, coarse_class_names)
    data: dict[str, Any] = {
        "image": pa.array(
            [{"bytes": b, "path": None} for b in png],
            type=features.arrow_schema.field("image").type,
        ),
        "label": _check_labels("labels", labels, n, class_names),
    }
    if coarse_labels is not None and coarse_class_names is not None:
        data["coarse_label"] = _check_labels("coarse_labels", coarse_labels, n, coarse_class_names)
    for name, values in columns.items():
        values = np.asarray(values)
        if values.shape != (n,):
            raise GeneratorError(f"columns[{name!r}] has shape {values.shape}, expected ({n},).")
        data[name] = values.astype(str) if values.dtype.kind in "UO" else values
    source_index = np.asarray(source_index)
    if source_index.shape != (n,) or source_index.dtype.kind not in "iu":
        raise GeneratorError(
            f"source_index must be an integer array of shape ({n},), got {source_index.shape}."
        )
    data["source_index"] = source_index.astype(np.int64)
    return pa.Table.from_pydict(data, schema=features.arrow_schema)


# --------------------------------------------------------------------------------------------
# configs: write, verify, list


def write_config(
    out_dir: str | Path,
    config: str,
    *,
    images: np.ndarray | Sequence[bytes],
    labels: np.ndarray,
    class_names: Sequence[str],
    columns: Mapping[str, np.ndarray],
    source_index: np.ndarray,
    coarse_labels: np.ndarray | None = None,
    coarse_class_names: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Write one config's ``test`` split atomically and record its checksum; return the shard.

    Args:
        images: uint8 ``(N, H, W, 3)`` (PNG-encoded here, in threads) or already-encoded PNG bytes.
        labels: int ``(N,)`` indices into ``class_names`` (stored as a ClassLabel ``label``).
        columns: extra per-row metadata, e.g. ``{"f_c": ..., "alpha": ..., "severity": ...}``;
            dtypes map to ``datasets.Value`` (ints keep their width, floats, bools, strings).
        source_index: int ``(N,)`` position of each image in the source split.
        coarse_labels / coarse_class_names: optional second ClassLabel (CIFAR-100 superclasses).
        metadata: JSON-serialisable generation parameters stored in ``checksum.json``; pass the
            same mapping to ``config_complete`` to accept only sets made with those parameters.

    Raises:
        GeneratorError: bad config name, shapes, dtypes, label ranges or reserved column names.
    """
    table = _build_table(
        images, labels, class_names, columns, source_index, coarse_labels, coarse_class_names
    )
    shard = shard_path(out_dir, config)
    marker = checksum_path(out_dir, config)
    marker.unlink(missing_ok=True)  # the set is incomplete from here until the marker is back
    _atomic_write(
        shard,
        lambda tmp: pq.write_table(table, tmp, row_group_size=ROW_GROUP_SIZE, compression="zstd"),
    )
    record = {
        "layout_version": LAYOUT_VERSION,
        "config": config,
        "split": SPLIT,
        "file": SHARD_NAME,
        "sha256": sha256_file(shard),
        "num_rows": table.num_rows,
        "metadata": _jsonable(metadata or {}),
    }
    _atomic_write(marker, lambda tmp: tmp.write_text(json.dumps(record, indent=2, sort_keys=True)))
    return shard


def _jsonable(metadata: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return json.loads(json.dumps(dict(metadata), sort_keys=True))
    except TypeError as err:
        raise GeneratorError(f"metadata must be JSON-serialisable: {err}") from err


def read_checksum(out_dir: str | Path, config: str) -> dict[str, Any] | None:
    """The checksum record of a config, or None when it is missing or unreadable."""
    marker = checksum_path(out_dir, config)
    try:
        record = json.loads(marker.read_text())
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None  # a torn or foreign marker means "not complete"; write_config replaces it
    return record if isinstance(record, dict) else None


def config_complete(
    out_dir: str | Path,
    config: str,
    *,
    metadata: Mapping[str, Any] | None = None,
    verify: bool = True,
) -> bool:
    """True when the config's shard exists, its sha256 matches and (if given) metadata matches."""
    record = read_checksum(out_dir, config)
    if record is None or record.get("layout_version") != LAYOUT_VERSION:
        return False
    shard = shard_path(out_dir, config)
    if not shard.is_file():
        return False
    if metadata is not None and record.get("metadata") != _jsonable(metadata):
        return False
    return not verify or sha256_file(shard) == record.get("sha256")


def list_configs(out_dir: str | Path) -> list[str]:
    """Configs under ``out_dir/data`` that have a checksum record (complete or not verified)."""
    root = Path(out_dir) / "data"
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob(f"*/{CHECKSUM_NAME}"))


# --------------------------------------------------------------------------------------------
# dataset card


def configs_yaml(configs: Iterable[str], *, include_all: bool = False) -> list[dict[str, Any]]:
    """The YAML ``configs:`` entries (one ``test`` split per config, optional ``all``)."""
    entries = [
        {
            "config_name": validate_config_name(name),
            "data_files": [{"split": SPLIT, "path": f"data/{name}/{SPLIT}-*.parquet"}],
        }
        for name in configs
    ]
    if include_all:
        entries.append(
            {
                "config_name": "all",
                "data_files": [{"split": SPLIT, "path": f"data/*/{SPLIT}-*.parquet"}],
            }
        )
    return entries


def build_card(
    *,
    configs: Sequence[str],
    pretty_name: str,
    body: str,
    license: str,
    tags: Sequence[str] = (),
    source_datasets: Sequence[str] = (),
    include_all: bool = False,
) -> DatasetCard:
    """A dataset card whose YAML header lists the configs; ``body`` is the markdown text."""
    data = DatasetCardData(
        pretty_name=pretty_name,
        license=license,
        task_categories=["image-classification"],
        tags=list(tags) or None,
        source_datasets=list(source_datasets) or None,
        size_categories=None,
        configs=configs_yaml(configs, include_all=include_all),
    )
    return DatasetCard(f"---\n{data.to_yaml()}\n---\n\n{body.strip()}\n")


def write_card(out_dir: str | Path, card: DatasetCard) -> Path:
    """Write README.md atomically (the card's YAML + text); figures go under ``images/``."""
    readme = Path(out_dir) / "README.md"
    content = str(card)
    _atomic_write(readme, lambda tmp: tmp.write_text(content, encoding="utf-8"))
    return readme


def figure_path(out_dir: str | Path, name: str) -> Path:
    """Where a card figure lives (``images/<name>``); link it in the card as ``images/<name>``."""
    path = Path(out_dir) / "images" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


# --------------------------------------------------------------------------------------------
# publishing


@dataclass(frozen=True)
class LocalFile:
    """A file of the folder to publish, with both hashes the Hub can report for it."""

    path_in_repo: str
    local: Path
    size: int
    sha256: str
    git_sha1: str

    def same_as(self, remote: RepoFile | None) -> bool:
        """True when the Hub already holds these bytes (LFS sha256 or git blob id matches)."""
        if remote is None:
            return False
        if remote.lfs is not None:
            return remote.lfs.sha256 == self.sha256
        return remote.blob_id == self.git_sha1


@dataclass
class PublishPlan:
    """Files to upload grouped into commits of bounded size, and what is left alone."""

    repo: str
    revision: str
    commits: list[list[LocalFile]] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    remote_only: list[str] = field(default_factory=list)
    remote_checked: bool = True

    @property
    def uploads(self) -> list[LocalFile]:
        return [f for commit in self.commits for f in commit]


@dataclass
class PublishResult:
    """What :func:`publish` did (or, with ``dry_run``, would do)."""

    plan: PublishPlan
    dry_run: bool
    created_repo: bool = False
    commit_ids: list[str] = field(default_factory=list)
    head: str | None = None
    """The full commit id of the branch after publishing (also when nothing was uploaded): what
    ``certbench benchmarks pin --hub-commit`` takes."""

    def summary(self) -> str:
        plan = self.plan
        size = sum(f.size for f in plan.uploads) / 1e6
        if self.dry_run:
            return (
                f"dry run: would upload {len(plan.uploads)} files ({size:.1f} MB) to "
                f"{plan.repo}@{plan.revision} in {len(plan.commits)} commits; remote state not "
                "checked (no network)."
            )
        return (
            f"{plan.repo}@{plan.revision}: uploaded {len(plan.uploads)} files ({size:.1f} MB) in "
            f"{len(self.commit_ids)} commits"
            + (" (repo created)" if self.created_repo else "")
            + f", skipped {len(plan.unchanged)} identical files"
            + (
                f", left {len(plan.remote_only)} Hub-only files untouched"
                if plan.remote_only
                else ""
            )
            + f". {plan.repo}@{plan.revision} is at commit {self.head}; pin a definition to it "
            f"with `certbench benchmarks pin DEFINITION --data FOLDER --hub-commit {self.head}`."
        )


def git_blob_sha1(path: Path) -> str:
    """The git object id of a file (what the Hub reports for non-LFS files)."""
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def local_files(folder: str | Path) -> list[LocalFile]:
    """The publishable files: README.md, images/**, data/** (no temp or hidden files).

    Raises:
        PublishError: the folder is not a generated dataset, a config is incomplete or its
            checksum does not verify (an interrupted run must be resumed before publishing), or
            a text file (card, checksum) names a local path.
    """
    root = Path(folder)
    if not (root / "README.md").is_file() or not (root / "data").is_dir():
        raise PublishError(
            f"{str(root)!r} is not a generated dataset folder: expected README.md and data/; "
            "run `certbench generate ...` first."
        )
    broken = [c for c in _config_folders(root) if not config_complete(root, c)]
    if broken:
        raise PublishError(
            f"{len(broken)} config(s) in {str(root)!r} are incomplete or fail their checksum "
            f"(e.g. {broken[:3]}); re-run the generator to finish them before publishing."
        )
    files = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if not path.is_file() or any(part.startswith(".") for part in rel.parts):
            continue
        if rel.parts[0] not in ("data", "images") and rel.as_posix() != "README.md":
            continue
        _refuse_local_paths(path, rel)
        files.append(
            LocalFile(
                path_in_repo=rel.as_posix(),
                local=path,
                size=path.stat().st_size,
                sha256=sha256_file(path),
                git_sha1=git_blob_sha1(path),
            )
        )
    return files


TEXT_SUFFIXES = (".md", ".json", ".yaml", ".yml", ".txt", ".csv")


def _refuse_local_paths(path: Path, rel: Path) -> None:
    """Published text must not name local paths (they leak user names and pin nothing)."""
    if path.suffix.lower() not in TEXT_SUFFIXES:
        return
    found = find_local_paths(path.read_text(encoding="utf-8", errors="replace"))
    if found:
        raise PublishError(
            f"{rel.as_posix()} names the local path {found[0]!r}; published files must record "
            "a source by Hub id + revision or content hash. Re-generate the card with this "
            "certbench version (or edit the file) before publishing."
        )


def _config_folders(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "data").iterdir() if p.is_dir())


def plan_publish(
    files: Sequence[LocalFile],
    remote: Mapping[str, RepoFile] | None,
    *,
    repo: str,
    revision: str,
    max_commit_bytes: int,
) -> PublishPlan:
    """Group the files that differ from ``remote`` into commits of at most ``max_commit_bytes``.

    ``remote=None`` means "unknown" (dry run): every file is planned. README.md goes in the last
    commit so the card never lists configs whose files are not on the Hub yet.
    """
    if max_commit_bytes < 1:
        raise PublishError(f"max_commit_bytes must be positive, got {max_commit_bytes}.")
    plan = PublishPlan(repo=repo, revision=revision, remote_checked=remote is not None)
    pending = []
    for f in files:
        if remote is not None and f.same_as(remote.get(f.path_in_repo)):
            plan.unchanged.append(f.path_in_repo)
        else:
            pending.append(f)
    pending.sort(key=lambda f: (f.path_in_repo == "README.md", f.path_in_repo))
    batch: list[LocalFile] = []
    used = 0
    for f in pending:
        if batch and used + f.size > max_commit_bytes:
            plan.commits.append(batch)
            batch, used = [], 0
        batch.append(f)
        used += f.size
    if batch:
        plan.commits.append(batch)
    if remote is not None:
        local = {f.path_in_repo for f in files}
        plan.remote_only = sorted(p for p in remote if p not in local and p != ".gitattributes")
    return plan


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Connection-level errors of whichever HTTP client huggingface_hub uses."""
    found: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for name in ("httpx2", "httpx", "requests"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue  # that client is simply not installed
        for attr in ("TransportError", "ConnectionError", "Timeout"):
            cls = getattr(module, attr, None)
            if isinstance(cls, type) and issubclass(cls, BaseException):
                found.append(cls)
    return tuple(found)


def _hub_error(err: BaseException, repo: str) -> PublishError:
    if isinstance(err, OfflineModeIsEnabled):
        return PublishError(
            f"cannot publish {repo!r}: HF_HUB_OFFLINE is set. Unset it on a machine with network "
            "access, or use --dry-run to see the plan."
        )
    if isinstance(err, LocalTokenNotFoundError):
        return PublishError(
            "no Hugging Face token found: run `hf auth login` or set HF_TOKEN, then retry."
        )
    if isinstance(err, HfHubHTTPError):
        status = err.response.status_code if err.response is not None else None
        if status in (401, 403):
            return PublishError(
                f"the Hub refused access to {repo!r} (HTTP {status}): log in with a token that "
                "can write to it (`hf auth login` or HF_TOKEN)."
            )
        if status in (409, 412):
            return PublishError(
                f"{repo!r} changed on the Hub while publishing (HTTP {status}); re-run the "
                "command to publish on top of the new head."
            )
        return PublishError(f"the Hub rejected the upload to {repo!r}: {err}")
    return PublishError(
        f"cannot reach the Hugging Face Hub to publish {repo!r} ({type(err).__name__}: {err}); "
        "check the network (or HF_ENDPOINT), or use --dry-run to see the plan offline."
    )


def publish(
    folder: str | Path,
    repo: str,
    *,
    private: bool = False,
    revision: str | None = None,
    dry_run: bool = False,
    max_commit_bytes: int = 1 << 30,
    log: Callable[[str], None] = print,
    api: HfApi | None = None,
) -> PublishResult:
    """Upload a generated folder to the dataset repo ``repo`` (created if needed).

    Files identical on the Hub (same LFS sha256 or git blob id) are skipped; the rest go in
    commits of bounded size, each made with ``parent_commit`` = the head we planned against, so
    a concurrent push makes the commit fail instead of being silently overwritten.

    Raises:
        PublishError: bad folder or repo id, no network, no/invalid token, concurrent change.
    """
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise PublishError(f"--repo {repo!r} must be ORG/NAME, e.g. my-org/cifar10-f.")
    branch = revision or "main"
    files = local_files(folder)
    if dry_run:
        plan = plan_publish(
            files, None, repo=repo, revision=branch, max_commit_bytes=max_commit_bytes
        )
        for i, commit in enumerate(plan.commits, 1):
            log(
                f"commit {i}/{len(plan.commits)}: {len(commit)} files, "
                f"{sum(f.size for f in commit)} bytes"
            )
            for f in commit:
                log(f"  + {f.path_in_repo} ({f.size} bytes, sha256 {f.sha256[:12]})")
        return PublishResult(plan=plan, dry_run=True)
    try:
        return _publish_online(api or HfApi(), files, repo, branch, private, max_commit_bytes, log)
    except (*_transport_errors(), HfHubHTTPError, LocalTokenNotFoundError) as err:
        raise _hub_error(err, repo) from err


def _publish_online(
    api: HfApi,
    files: list[LocalFile],
    repo: str,
    branch: str,
    private: bool,
    max_commit_bytes: int,
    log: Callable[[str], None],
) -> PublishResult:
    created = False
    if not api.repo_exists(repo, repo_type="dataset"):
        api.create_repo(repo, repo_type="dataset", private=private, exist_ok=True)
        created = True
        log(f"created dataset repo {repo} ({'private' if private else 'public'})")
    if branch != "main":
        api.create_branch(repo, branch=branch, repo_type="dataset", exist_ok=True)
    head = api.repo_info(repo, repo_type="dataset", revision=branch).sha
    remote = {
        entry.path: entry
        for entry in api.list_repo_tree(repo, repo_type="dataset", revision=head, recursive=True)
        if isinstance(entry, RepoFile)
    }
    plan = plan_publish(
        files, remote, repo=repo, revision=branch, max_commit_bytes=max_commit_bytes
    )
    result = PublishResult(plan=plan, dry_run=False, created_repo=created, head=head)
    log(
        f"{repo}@{branch} is at commit {head}: {len(plan.unchanged)} files already identical "
        f"there; {len(plan.uploads)} to upload"
    )
    for i, commit in enumerate(plan.commits, 1):
        info = api.create_commit(
            repo,
            operations=[CommitOperationAdd(f.path_in_repo, f.local) for f in commit],
            commit_message=f"certbench publish ({i}/{len(plan.commits)}): {len(commit)} files",
            repo_type="dataset",
            revision=branch,
            parent_commit=head,
        )
        head = info.oid
        result.commit_ids.append(head)
        result.head = head
        log(f"commit {i}/{len(plan.commits)} {head}: {len(commit)} files")
    return result
