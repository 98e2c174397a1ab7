"""Local copies of Hub datasets: ``certbench datasets fetch cifar10``.

The leaderboard service reads a test set that names only a Hub ``repo`` from
``<datasets dir>/<org>/<name>`` when that folder exists
(``models.benchmarks.sources.resolve_source``; for a test set pinned to a Hub commit, only when a
``sha256`` pin can verify the copy), so one download on a machine with network access makes a
benchmark work offline, and a copy made elsewhere (``hf download REPO --repo-type dataset --revision
COMMIT --local-dir DIR``) can be carried over.

The packaged datasets (``cifar10``, ``cifar100``) are downloaded at the commit the packaged
definitions pin (``certbench.data.pins``), never at the moving default branch, and their
shards are checked against the pinned SHA-256 before the copy is put in place; an existing copy
is checked the same way, so a stale or altered one is reported with the command that replaces it.

The download goes to ``<name>.partial`` first (``huggingface_hub.snapshot_download``, which shows
a progress bar per file and resumes an interrupted run) and is renamed into place only when
complete, so a half-downloaded copy is never mistaken for the data.

The datasets dir is the service's ``CERTBENCH_DATASETS_DIR`` (default
``$CERTBENCH_DATA_DIR/datasets``, i.e. ``certbench-data/datasets``): read here from the same
environment variables, since ``certbench/`` imports nothing from the service's packages (a test
keeps the two defaults equal).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from certbench.data.names import HUB_ALIASES, alias_of, is_hub_id, unknown_name_message
from certbench.data.pins import PinnedSource, pinned_source
from certbench.errors import DataSourceError

__all__ = [
    "FetchedDataset",
    "copy_problems",
    "default_datasets_dir",
    "definition_folder",
    "fetch_dataset",
    "hub_repo",
    "mirror_path",
]


@dataclass(frozen=True)
class FetchedDataset:
    """A local copy of a Hub dataset: the repo, where it lies, whether it was there before, the
    commit downloaded (None for a copy kept as found) and the splits whose bytes were checked
    against the pin."""

    repo: str
    path: Path
    already_there: bool
    revision: str | None = None
    verified: tuple[str, ...] = ()


def default_datasets_dir() -> Path:
    """``CERTBENCH_DATASETS_DIR``, else ``$CERTBENCH_DATA_DIR/datasets`` (``certbench-data``)."""
    explicit = os.environ.get("CERTBENCH_DATASETS_DIR")
    if explicit:
        return Path(explicit).expanduser().resolve()
    data_dir = os.environ.get("CERTBENCH_DATA_DIR") or "certbench-data"
    return (Path(data_dir).expanduser() / "datasets").resolve()


def hub_repo(name: str) -> str:
    """The Hub id ``name`` stands for (an alias such as ``cifar10``, or ``org/name`` itself).

    Raises DataSourceError for anything else: a bare name gets "did you mean cifar10?".
    """
    repo = HUB_ALIASES.get(name, name)
    if "/" not in repo:
        raise DataSourceError(unknown_name_message(name))
    if not is_hub_id(repo) or ".." in repo:
        raise DataSourceError(
            f"{name!r} is not a Hub dataset id: give org/name (e.g. uoft-cs/cifar10) or one of "
            f"the aliases {', '.join(HUB_ALIASES)}"
        )
    return repo


def mirror_path(repo: str, datasets_dir: Path) -> Path:
    """``<datasets_dir>/<org>/<name>``: where the service looks for a local copy of ``repo``."""
    org, name = hub_repo(repo).split("/")
    return datasets_dir / org / name


def definition_folder(folder: str, datasets_dir: Path) -> Path:
    """Where the service reads a benchmark definition's ``folder``: under ``datasets_dir`` when
    relative (as ``models.benchmarks.sources.locate_source`` resolves it), as is when absolute.

    Raises DataSourceError for a folder that climbs out of ``datasets_dir`` (``..``).
    """
    path = Path(folder).expanduser()
    if not folder or ".." in path.parts:
        raise DataSourceError(
            f"folder {folder!r}: give the `folder` a benchmark definition names (e.g. "
            "cifar10-local), a path under the datasets dir without '..'"
        )
    return path if path.is_absolute() else datasets_dir / path


def fetch_dataset(
    name: str,
    datasets_dir: Path,
    *,
    force: bool = False,
    revision: str | None = None,
    folder: str | None = None,
) -> FetchedDataset:
    """Download Hub dataset ``name`` (all files of one revision) into its local copy:
    ``<datasets_dir>/<org>/<name>``, or the definition ``folder`` given (``definition_folder``),
    for a test set that names one.

    ``revision`` defaults to the pinned commit of a packaged dataset (``cifar10``, ``cifar100``)
    and to the default branch otherwise. An existing copy is kept unless ``force``; a packaged
    dataset's copy, new or kept, must hold the pinned bytes.

    Raises DataSourceError when the Hub cannot be reached or the repo does not exist (saying how
    to carry a copy over instead), or when a copy differs from the pinned bytes (naming both
    hashes and the command that replaces it).
    """
    repo = hub_repo(name)
    pin = pinned_source(repo)
    if revision is None and pin is not None:
        revision = pin.commit
    target = definition_folder(folder, datasets_dir) if folder else mirror_path(repo, datasets_dir)
    if target.is_dir() and not force:
        return FetchedDataset(repo, target, already_there=True, verified=_verify(target, pin))
    partial = target.with_name(f"{target.name}.partial")
    partial.parent.mkdir(parents=True, exist_ok=True)
    commit = _download(repo, revision, partial, target)
    shutil.rmtree(partial / ".cache", ignore_errors=True)  # download bookkeeping, not data
    verified: tuple[str, ...] = ()
    if pin is not None and commit == pin.commit:
        problems = copy_problems(partial, pin)
        if problems:
            shutil.rmtree(partial)  # never resume from bytes known to be wrong
            raise DataSourceError(
                f"downloaded {repo}@{commit}, but its files are not the pinned bytes: "
                f"{'; '.join(problems)}. The download was discarded; run the command again"
            )
        verified = tuple(sorted(pin.files))
    if target.exists():
        shutil.rmtree(target)
    partial.rename(target)
    return FetchedDataset(repo, target, already_there=False, revision=commit, verified=verified)


def _download(repo: str, revision: str | None, partial: Path, target: Path) -> str:
    """Download ``repo`` at ``revision`` into ``partial`` (resumes an interrupted run); returns
    the commit downloaded.

    The revision is resolved to its commit first, in one request: without network that fails at
    once, where listing a commit's files would retry for half a minute, and a branch name is
    recorded as the commit it pointed at.
    """
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    at = f" --revision {revision}" if revision else ""
    offline = (
        f"could not download {repo} from the Hugging Face Hub ({{}}). Without network access, "
        f"copy it from a machine that has it: `hf download {repo} --repo-type dataset{at} "
        f"--local-dir DIR` there, then move DIR to {target}"
    )
    try:
        commit = HfApi().dataset_info(repo, revision=revision).sha
        snapshot_download(repo, repo_type="dataset", revision=commit, local_dir=partial)
    except LocalEntryNotFoundError as err:
        raise DataSourceError(offline.format(_first_line(err))) from err
    except HfHubHTTPError as err:
        raise DataSourceError(
            f"the Hugging Face Hub refused {repo}{'@' + revision if revision else ''}: "
            f"{_first_line(err)}; check the id and revision, or log in (`hf auth login`) for "
            "gated or private data"
        ) from err
    except Exception as err:  # the HTTP client's transport errors (httpx, httpx2 or requests)
        raise DataSourceError(offline.format(f"{type(err).__name__}: {_first_line(err)}")) from err
    if not commit:
        raise DataSourceError(f"the Hugging Face Hub named no commit for {repo}{at}")
    return commit


def copy_problems(folder: Path, pin: PinnedSource) -> list[str]:
    """How a local copy of ``pin.repo`` differs from the pinned bytes (empty: it holds them):
    each shard with a pinned SHA-256 must be present and hash to it."""
    problems = []
    for split, (path, pinned) in sorted(pin.files.items()):
        shard = folder / path
        if not shard.is_file():
            problems.append(f"{split} split: {path} is missing")
            continue
        found = _sha256(shard)
        if found != pinned:
            problems.append(f"{split} split: {path} has sha256 {found}, pinned {pinned}")
    return problems


def _verify(folder: Path, pin: PinnedSource | None) -> tuple[str, ...]:
    """The splits of an existing copy checked against ``pin`` (none without a pin). Raises
    DataSourceError naming every difference and the command that replaces the copy."""
    if pin is None:
        return ()
    problems = copy_problems(folder, pin)
    if problems:
        alias = alias_of(pin.repo)
        raise DataSourceError(
            f"the copy of {pin.repo} at {folder} is not the pinned commit {pin.commit}: "
            f"{'; '.join(problems)}. Replace it with `certbench datasets fetch {alias} --force`"
        )
    return tuple(sorted(pin.files))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
