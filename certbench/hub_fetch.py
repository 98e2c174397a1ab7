"""Local copies of Hub datasets: ``certbench datasets fetch cifar10``.

The leaderboard service reads a test set that names only a Hub ``repo`` from
``<datasets dir>/<org>/<name>`` when that folder exists (``models.work.resolve_source``), so one
download on a machine with network access makes a benchmark work offline, and a copy made
elsewhere (``hf download REPO --repo-type dataset --local-dir DIR``) can be carried over.

The download goes to ``<name>.partial`` first (``huggingface_hub.snapshot_download``, which shows
a progress bar per file and resumes an interrupted run) and is renamed into place only when
complete, so a half-downloaded copy is never mistaken for the data.

The datasets dir is the service's ``CERTBENCH_DATASETS_DIR`` (default
``$CERTBENCH_DATA_DIR/datasets``, i.e. ``certbench-data/datasets``): read here from the same
environment variables, since ``certbench/`` imports nothing from the service's packages (a test
keeps the two defaults equal).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from certbench.dataset_names import HUB_ALIASES, is_hub_id, unknown_name_message
from certbench.errors import DataSourceError

__all__ = [
    "FetchedDataset",
    "default_datasets_dir",
    "definition_folder",
    "fetch_dataset",
    "hub_repo",
    "mirror_path",
]


@dataclass(frozen=True)
class FetchedDataset:
    """A local copy of a Hub dataset: the repo, where it lies, and whether it was there before."""

    repo: str
    path: Path
    already_there: bool


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
    relative (as ``models.work.resolve_source`` resolves it), as is when absolute.

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
    name: str, datasets_dir: Path, *, force: bool = False, folder: str | None = None
) -> FetchedDataset:
    """Download Hub dataset ``name`` (all files of its default revision) into its local copy:
    ``<datasets_dir>/<org>/<name>``, or the definition ``folder`` given (``definition_folder``),
    for a test set that names one.

    An existing copy is kept unless ``force``. Raises DataSourceError when the Hub cannot be
    reached or the repo does not exist, saying how to carry a copy over instead.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    repo = hub_repo(name)
    target = definition_folder(folder, datasets_dir) if folder else mirror_path(repo, datasets_dir)
    if target.is_dir() and not force:
        return FetchedDataset(repo, target, already_there=True)
    partial = target.with_name(f"{target.name}.partial")
    partial.parent.mkdir(parents=True, exist_ok=True)
    try:
        snapshot_download(repo, repo_type="dataset", local_dir=partial)
    except LocalEntryNotFoundError as err:
        raise DataSourceError(
            f"could not download {repo} from the Hugging Face Hub ({_first_line(err)}). Without "
            f"network access, copy it from a machine that has it: `hf download {repo} "
            f"--repo-type dataset --local-dir DIR` there, then move DIR to {target}"
        ) from err
    except HfHubHTTPError as err:
        raise DataSourceError(
            f"the Hugging Face Hub refused {repo}: {_first_line(err)}; check the id, or log in "
            "(`hf auth login`) for gated or private data"
        ) from err
    shutil.rmtree(partial / ".cache", ignore_errors=True)  # download bookkeeping, not data
    if target.exists():
        shutil.rmtree(target)
    partial.rename(target)
    return FetchedDataset(repo, target, already_there=False)


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
