"""Test-set sources: the Hugging Face Hub, local Hub-layout folders and torchvision CIFAR folders.

The entry points (:func:`load_images`, :func:`list_configs`, ...) tell which kind of source a
path or name is and hand it to its reader: :mod:`certbench.data.hub_datasets`,
:mod:`certbench.data.folders` or :mod:`certbench.data.torchvision_cifar`. Every source becomes one
validated :class:`ImageSet` (:mod:`certbench.data.image_set`), so certification, generators and the
service never care where the pixels came from. ``ImageSet``, ``Subset`` and ``HUB_ALIASES`` are
re-exported here, the documented place to import them from with ``load_images``.
"""

from __future__ import annotations

from pathlib import Path

from certbench.data.folders import choose_config, folder_configs, glob_files, load_folder
from certbench.data.hub_datasets import hub_configs, load_hub
from certbench.data.image_set import ImageSet, Subset
from certbench.data.names import HUB_ALIASES, check_name, is_hub_id
from certbench.data.torchvision_cifar import load_torchvision, torchvision_dirs
from certbench.errors import DataSourceError, DataUnavailableError

__all__ = [
    "HUB_ALIASES",
    "ImageSet",
    "Subset",
    "list_configs",
    "load_images",
]


def load_images(
    source: str | Path,
    *,
    config: str | None = None,
    split: str = "test",
    revision: str | None = None,
    subset: Subset | None = None,
) -> ImageSet:
    """Load one split of a test set as an :class:`ImageSet`.

    ``source`` is an existing local path (a Hub-layout folder, or a torchvision CIFAR folder: the
    ``cifar-10-batches-py``/``cifar-100-python`` folder itself or its parent), a Hub dataset id
    (``org/name``), or an alias of :data:`HUB_ALIASES`. ``config`` picks a Hub/folder config (or
    ``cifar10``/``cifar100`` in a torchvision folder holding both); ``revision`` applies to the Hub.

    Raises:
        DataSourceError: the source is missing, unreachable or unreadable, the config or split
            is unknown, or the images/labels do not form a valid set.
    """
    subset = subset or Subset()
    if not isinstance(subset, Subset):
        raise DataSourceError(f"subset must be a certbench.data.sources.Subset, got {subset!r}")
    kind, where = _resolve(source)
    if kind == "hub":
        return load_hub(str(where), config, split, revision, subset)
    _reject_revision(revision, where)
    if kind == "torchvision":
        return load_torchvision(Path(where), config, split, subset)
    return load_folder(Path(where), config, split, subset)


def list_configs(source: str | Path, revision: str | None = None) -> list[str]:
    """Names of the configs (test sets) a source offers, in the order the source lists them.

    Raises:
        DataSourceError: as :func:`load_images`.
    """
    kind, where = _resolve(source)
    if kind == "hub":
        return hub_configs(str(where), revision)
    _reject_revision(revision, where)
    if kind == "torchvision":
        return list(torchvision_dirs(Path(where)))
    return list(folder_configs(Path(where)))


def source_kind(source: str | Path) -> tuple[str, str]:
    """("hub", repo id) for a Hub source; ("torchvision", "") or ("folder", "") for local ones.

    The local path itself is never returned, so callers can publish the result.

    Raises:
        DataSourceError: as :func:`load_images`.
    """
    kind, where = _resolve(source)
    return kind, str(where) if kind == "hub" else ""


def config_files(folder: str | Path, config: str | None = None, split: str = "test") -> list[Path]:
    """The data files (parquet) of one config's split in a local Hub-layout folder, in order.

    Raises:
        DataSourceError: not a Hub-layout folder, unknown config or split, missing files.
    """
    kind, where = _resolve(folder)
    if kind != "folder":
        raise DataSourceError(
            f"{str(folder)!r} is not a local Hub-layout folder (README.md with `configs:` and "
            "parquet files); content hashes are defined for that layout only"
        )
    path = Path(where)
    configs = folder_configs(path)
    chosen = choose_config(path, configs, config)
    if split not in configs[chosen]:
        raise DataSourceError(
            f"unknown split {split!r} for config {chosen!r} in {str(folder)!r}; available: "
            f"{sorted(configs[chosen])}"
        )
    return glob_files(path, chosen, split, configs[chosen][split])


def _reject_revision(revision: str | None, where: Path | str) -> None:
    if revision is not None:
        raise DataSourceError(
            f"revision={revision!r} only applies to Hub datasets, but {str(where)!r} is a local "
            "folder; drop the revision or check out that revision locally"
        )


def _resolve(source: str | Path) -> tuple[str, Path | str]:
    """Classify ``source`` as ("hub", repo id), ("torchvision", dir) or ("folder", dir)."""
    if not isinstance(source, str | Path):
        raise DataSourceError(f"dataset source must be a path or a Hub id, got {source!r}")
    path = Path(source).expanduser()
    if isinstance(source, str) and not path.exists():
        if source in HUB_ALIASES:
            return "hub", HUB_ALIASES[source]
        if is_hub_id(source):
            return "hub", source
        check_name(source)
    if not path.exists():
        raise DataUnavailableError(
            f"dataset source {str(source)!r} does not exist",
            advice="",
            source=str(source),
            hub=False,
        )
    if not path.is_dir():
        raise DataSourceError(
            f"dataset source {str(source)!r} is a file; pass the folder that holds the dataset "
            "(a Hub-layout folder with README.md, or a torchvision CIFAR folder)"
        )
    if torchvision_dirs(path):
        return "torchvision", path
    if (path / "README.md").is_file() or next(path.rglob("*.parquet"), None) is not None:
        return "folder", path
    raise DataSourceError(
        f"folder {str(source)!r} is not a dataset: expected README.md with YAML `configs:` and "
        "parquet files (Hub layout), or cifar-10-batches-py/ or cifar-100-python/ (torchvision "
        "layout)"
    )
