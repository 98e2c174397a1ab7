"""Test sets read from the Hugging Face Hub with ``datasets`` (a Hub id such as
``uoft-cs/cifar10``): its configs and one split as an :class:`~certbench.data.image_set.ImageSet`.
Hub failures become :class:`~certbench.errors.DataSourceError`; an unreachable Hub or an
unknown dataset says how to use a local folder instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from certbench.data.decoding import image_set_from_rows
from certbench.data.image_set import ImageSet, Subset, selected_positions
from certbench.errors import DataSourceError, DataUnavailableError

if TYPE_CHECKING:
    from datasets import Dataset


def _local_hint(repo: str) -> str:
    """The command-line user's fix for Hub data out of reach (a service gives its own)."""
    return (
        "pass a local folder instead: a folder in the Hub layout (README.md with YAML `configs:` "
        f"and parquet files, e.g. made with `hf download {repo} --repo-type dataset --local-dir "
        "DIR` on a machine with network access) or a torchvision CIFAR folder containing "
        "cifar-10-batches-py/ or cifar-100-python/"
    )


def _hub_call(repo: str, what: str, call: Callable[[], Any]) -> Any:
    """Run a ``datasets`` call against the Hub, turning its failures into DataSourceError."""
    from datasets.exceptions import DatasetNotFoundError

    try:
        return call()
    except ConnectionError as err:
        raise DataUnavailableError(
            f"could not reach the Hugging Face Hub to {what} {repo!r} ({err}); no local path "
            f"{repo!r} exists either",
            advice=f"without network access, {_local_hint(repo)}",
            source=repo,
            hub=True,
        ) from err
    except DatasetNotFoundError as err:
        raise DataUnavailableError(
            f"Hub dataset {repo!r} was not found or is not accessible ({err})",
            advice=f"check the id, log in for gated/private data, or {_local_hint(repo)}",
            source=repo,
            hub=True,
        ) from err
    except Exception as err:  # datasets raises many types (ValueError for bad config/split, ...)
        raise DataSourceError(f"cannot {what} Hub dataset {repo!r}: {err}") from err


def hub_configs(repo: str, revision: str | None) -> list[str]:
    import datasets

    return list(
        _hub_call(
            repo,
            "list the configs of",
            lambda: datasets.get_dataset_config_names(repo, revision=revision),
        )
    )


def load_hub(
    repo: str, config: str | None, split: str, revision: str | None, subset: Subset
) -> ImageSet:
    import datasets

    ds: Dataset = _hub_call(
        repo,
        "load",
        lambda: datasets.load_dataset(repo, config, split=split, revision=revision),
    )
    positions = selected_positions(subset, len(ds), f"{repo}/{split}")
    rows = ds.select(positions).with_format("arrow")[:]
    config_name = ds.info.config_name or config or "default"
    return image_set_from_rows(
        rows, ds.features, name=f"{repo}/{config_name}/{split}", positions=positions
    )
