"""certbench.data.sources: a source resolves to the Hub, a Hub-layout folder or a torchvision
folder, and a missing, misspelt or unusable source gives a clear error."""

from __future__ import annotations

import re
from pathlib import Path

import datasets
import pytest

from certbench.data.sources import list_configs, load_images
from certbench.errors import CertbenchError, DataSourceError


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(DataSourceError, match=r"does not exist"):
        load_images(tmp_path / "nowhere")
    with pytest.raises(DataSourceError, match=r"does not exist"):
        load_images("./relative/nowhere")


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [("cifr10", "cifar10"), ("cifar-10", "cifar10"), ("CIFAR100", "cifar100")],
)
def test_misspelt_name_suggests_an_alias_without_the_hub(
    name: str, suggestion: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bare name that is no alias is refused before any Hub call (which would retry for ~30 s
    offline): the Hub client is made to fail loudly if it is reached at all."""

    def no_hub(*args: object, **kwargs: object) -> None:
        raise AssertionError("the Hub was queried for a bare, unknown name")

    monkeypatch.setattr(datasets, "load_dataset", no_hub)
    monkeypatch.setattr(datasets, "get_dataset_config_names", no_hub)
    message = f"unknown dataset {name!r}; did you mean {suggestion}?"
    with pytest.raises(DataSourceError, match=re.escape(message)):
        load_images(name)
    with pytest.raises(DataSourceError, match=re.escape(message)):
        list_configs(name)


def test_unknown_name_without_a_close_alias_lists_the_names() -> None:
    with pytest.raises(DataSourceError) as caught:
        load_images("imagenette")
    assert "did you mean" not in str(caught.value)
    assert "cifar10, cifar100" in str(caught.value) and "org/name" in str(caught.value)


def test_file_instead_of_folder(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(DataSourceError, match=r"is a file; pass the folder"):
        load_images(tmp_path / "f.txt")


def test_folder_that_is_not_a_dataset(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(DataSourceError, match=r"is not a dataset.*cifar-10-batches-py"):
        load_images(tmp_path)


def test_errors_are_catchable_as_certbench_errors(tmp_path: Path) -> None:
    with pytest.raises(CertbenchError):
        load_images(tmp_path / "nowhere")
