"""certbench.data.hub_datasets: the Hub path converts a dataset with Hub columns, and an offline
Hub fails with advice, never a raw traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import datasets
import numpy as np
import pytest

from certbench.data.image_set import Subset
from certbench.data.names import HUB_ALIASES
from certbench.data.sources import list_configs, load_images
from certbench.errors import DataSourceError
from tests.support import timing
from tests.support.data_layouts import (
    CIFAR100_COARSE,
    CIFAR100_FINE,
    assert_same,
    random_images,
    random_labels,
    write_hub_folder,
)

N = 40


@pytest.fixture(scope="module")
def uoft_cifar100(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local copy shaped like uoft-cs/cifar100 (img, fine_label, coarse_label; cifar100/)."""
    root = tmp_path_factory.mktemp("uoft")
    for split, seed in (("train", 11), ("test", 12)):
        write_hub_folder(
            root,
            "cifar100",
            random_images(N, seed=seed),
            random_labels(N, 100, seed=seed),
            class_names=CIFAR100_FINE,
            coarse_labels=random_labels(N, 20, seed=seed + 1),
            coarse_class_names=CIFAR100_COARSE,
            split=split,
            data_dir="",
            image_column="img",
            label_column="fine_label",
        )
    return root


def test_hub_dataset_conversion(
    uoft_cifar100: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Hub path (datasets.load_dataset -> arrow -> ImageSet) on a dataset with Hub columns.

    ``load_dataset`` takes a local folder exactly as it takes a repo id, so this runs the same
    conversion a real Hub download goes through, without network.
    """
    from certbench.data.hub_datasets import load_hub

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path)  # keep ~/.cache clean
    image_set = load_hub(str(uoft_cifar100), None, "test", None, Subset(skip=9, limit=4))
    rows = np.array([0, 9, 18, 27])
    assert_same(image_set, random_images(N, seed=12)[rows], random_labels(N, 100, seed=12)[rows])
    np.testing.assert_array_equal(image_set.indices.numpy(), rows)
    assert image_set.coarse_labels is not None
    np.testing.assert_array_equal(
        image_set.coarse_labels.numpy(), random_labels(N, 20, seed=13)[rows]
    )
    assert image_set.class_names == CIFAR100_FINE
    assert image_set.coarse_class_names == CIFAR100_COARSE
    assert image_set.name == f"{uoft_cifar100}/cifar100/test"
    with pytest.raises(DataSourceError, match=r"cannot load Hub dataset.*validation"):
        load_hub(str(uoft_cifar100), None, "validation", None, Subset())


def test_hub_columns_in_a_local_folder(uoft_cifar100: Path) -> None:
    """A local download of uoft-cs/cifar100 loads as a Hub-layout folder."""
    assert list_configs(uoft_cifar100) == ["cifar100"]
    image_set = load_images(uoft_cifar100, split="train")
    assert_same(image_set, random_images(N, seed=11), random_labels(N, 100, seed=11))
    assert image_set.coarse_labels is not None
    np.testing.assert_array_equal(image_set.coarse_labels.numpy(), random_labels(N, 20, seed=12))


@pytest.mark.slow  # a fresh interpreter importing torch and datasets: ~10 s on 2 busy cores
def test_offline_hub_gives_clear_error() -> None:
    """No network here: every Hub path must fail with advice, never a raw traceback."""
    script = textwrap.dedent(
        """
        from certbench.data.sources import list_configs, load_images
        from certbench.errors import DataSourceError
        for call in (
            lambda: load_images("cifar10"),
            lambda: load_images("certbench-nonexistent/xyz", config="a", revision="main"),
            lambda: list_configs("cifar100"),
        ):
            try:
                call()
            except DataSourceError as err:
                print("ERR", str(err).replace("\\n", " "))
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=timing.seconds(300),
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("ERR")]
    assert len(lines) == 3, done.stdout + done.stderr
    for line, repo in zip(
        lines,
        [HUB_ALIASES["cifar10"], "certbench-nonexistent/xyz", HUB_ALIASES["cifar100"]],
        strict=True,
    ):
        assert "could not reach the Hugging Face Hub" in line
        assert repr(repo) in line
        assert "local folder" in line and "cifar-10-batches-py" in line
