"""certbench.data.folders: local Hub-layout folders round-trip byte-exactly with their metadata
columns, and every malformed README, pattern or parquet file gives a clear error."""

from __future__ import annotations

import textwrap
from pathlib import Path

import datasets
import numpy as np
import pytest

from certbench.data.image_set import Subset
from certbench.data.sources import list_configs, load_images
from certbench.errors import DataSourceError
from tests.support.data_layouts import (
    CIFAR10_CLASSES,
    CIFAR100_COARSE,
    CIFAR100_FINE,
    assert_same,
    random_images,
    random_labels,
    write_hub_folder,
)

N = 40


@pytest.fixture(scope="module")
def hub_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hub-layout folder with two CIFAR-F-like configs and one CIFAR-100-like config."""
    root = tmp_path_factory.mktemp("hub")
    extra = {
        "f_c": np.full(N, 5, np.int64),
        "alpha": np.full(N, 0.5, np.float32),
        "eps": np.linspace(8, 12, N),
        "severity": np.arange(N, dtype=np.int64) % 3 + 1,
        "corruption": np.array(["fourier"] * N),
    }
    write_hub_folder(
        root,
        "fc05_a0p5_s1",
        random_images(N, seed=5),
        random_labels(N, 10, seed=5),
        class_names=CIFAR10_CLASSES,
        extra=extra,
        source_index=np.arange(N) * 25,
    )
    write_hub_folder(
        root,
        "plain",
        random_images(N, seed=6),
        random_labels(N, 10, seed=6),
        class_names=CIFAR10_CLASSES,
    )
    write_hub_folder(
        root,
        "c100",
        random_images(N, seed=7),
        random_labels(N, 100, seed=7),
        class_names=CIFAR100_FINE,
        coarse_labels=random_labels(N, 20, seed=8),
        coarse_class_names=CIFAR100_COARSE,
    )
    return root


def test_hub_folder_round_trip_with_metadata(hub_root: Path) -> None:
    image_set = load_images(hub_root, config="fc05_a0p5_s1")
    assert_same(image_set, random_images(N, seed=5), random_labels(N, 10, seed=5))
    assert image_set.class_names == CIFAR10_CLASSES
    assert image_set.name == f"{hub_root.name}/fc05_a0p5_s1/test"
    np.testing.assert_array_equal(image_set.indices.numpy(), np.arange(N) * 25)
    assert set(image_set.extra) == {"f_c", "alpha", "eps", "severity", "corruption"}
    np.testing.assert_array_equal(image_set.extra["eps"], np.linspace(8, 12, N))
    np.testing.assert_array_equal(image_set.extra["severity"], np.arange(N) % 3 + 1)
    assert image_set.extra["alpha"].dtype == np.float32
    assert list(image_set.extra["corruption"]) == ["fourier"] * N


def test_hub_folder_subset_maps_source_index(hub_root: Path) -> None:
    image_set = load_images(hub_root, config="fc05_a0p5_s1", subset=Subset(skip=10, limit=3))
    rows = np.array([0, 10, 20])
    assert_same(image_set, random_images(N, seed=5)[rows], random_labels(N, 10, seed=5)[rows])
    np.testing.assert_array_equal(image_set.indices.numpy(), rows * 25)
    np.testing.assert_array_equal(image_set.extra["severity"], rows % 3 + 1)


def test_hub_folder_without_source_index_uses_positions(hub_root: Path) -> None:
    image_set = load_images(hub_root, config="plain", subset=Subset(skip=13))
    rows = np.array([0, 13, 26, 39])
    assert_same(image_set, random_images(N, seed=6)[rows], random_labels(N, 10, seed=6)[rows])
    np.testing.assert_array_equal(image_set.indices.numpy(), rows)
    assert image_set.extra == {}


def test_hub_folder_coarse_labels(hub_root: Path) -> None:
    image_set = load_images(hub_root, config="c100")
    assert_same(image_set, random_images(N, seed=7), random_labels(N, 100, seed=7))
    assert image_set.coarse_labels is not None
    np.testing.assert_array_equal(image_set.coarse_labels.numpy(), random_labels(N, 20, seed=8))
    assert image_set.class_names == CIFAR100_FINE
    assert image_set.coarse_class_names == CIFAR100_COARSE


def test_hub_folder_list_configs_in_readme_order(hub_root: Path) -> None:
    assert list_configs(hub_root) == ["fc05_a0p5_s1", "plain", "c100"]


def test_written_folder_loads_with_datasets(hub_root: Path, tmp_path: Path) -> None:
    """The layout is the real Hub layout: `datasets.load_dataset` reads it unchanged."""
    ds = datasets.load_dataset(str(hub_root), "fc05_a0p5_s1", split="test", cache_dir=str(tmp_path))
    assert ds.features["label"].names == list(CIFAR10_CLASSES)
    assert isinstance(ds.features["image"], datasets.Image)
    ours = load_images(hub_root, config="fc05_a0p5_s1")
    theirs = np.stack([np.asarray(img).transpose(2, 0, 1) for img in ds["image"]])
    np.testing.assert_array_equal(ours.images.numpy(), theirs)
    np.testing.assert_array_equal(ours.labels.numpy(), ds["label"])
    np.testing.assert_array_equal(ours.indices.numpy(), ds["source_index"])


def test_hub_folder_single_config_is_the_default(tmp_path: Path) -> None:
    write_hub_folder(tmp_path, "only", random_images(3), [0, 1, 2], class_names=["a", "b", "c"])
    image_set = load_images(tmp_path)
    assert image_set.class_names == ("a", "b", "c")
    assert image_set.name == f"{tmp_path.name}/only/test"


def test_hub_folder_train_and_test_splits(tmp_path: Path) -> None:
    names = ["a", "b"]
    write_hub_folder(tmp_path, "cfg", random_images(3, seed=1), [0, 1, 0], class_names=names)
    write_hub_folder(
        tmp_path, "cfg", random_images(5, seed=2), [1] * 5, class_names=names, split="train"
    )
    assert_same(load_images(tmp_path, split="train"), random_images(5, seed=2), np.ones(5))
    assert_same(load_images(tmp_path, split="test"), random_images(3, seed=1), [0, 1, 0])


def test_folder_without_readme_is_one_default_config(tmp_path: Path) -> None:
    images = random_images(6)
    write_hub_folder(tmp_path / "src", "x", images, [1] * 6, class_names=["a", "b"])
    (tmp_path / "plain").mkdir()
    parquet = next((tmp_path / "src").rglob("*.parquet"))
    (tmp_path / "plain" / "test.parquet").write_bytes(parquet.read_bytes())
    assert list_configs(tmp_path / "plain") == ["default"]
    assert_same(load_images(tmp_path / "plain"), images, [1] * 6)


def test_hub_folder_unknown_config_lists_available(hub_root: Path) -> None:
    with pytest.raises(
        DataSourceError, match=r"unknown config 'nope'.*\['fc05_a0p5_s1', 'plain', 'c100'\]"
    ):
        load_images(hub_root, config="nope")


def test_hub_folder_needs_config_when_several(hub_root: Path) -> None:
    with pytest.raises(DataSourceError, match=r"has 3 configs; choose one with config="):
        load_images(hub_root)


def test_hub_folder_unknown_split(hub_root: Path) -> None:
    with pytest.raises(DataSourceError, match=r"unknown split 'train'.*available: \['test'\]"):
        load_images(hub_root, config="plain", split="train")


def test_hub_folder_corrupt_parquet(tmp_path: Path) -> None:
    path = write_hub_folder(tmp_path, "x", random_images(2), [0, 1], class_names=["a", "b"])
    path.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(DataSourceError, match=r"cannot read the parquet files of config 'x'"):
        load_images(tmp_path)


def test_hub_folder_empty_split(tmp_path: Path) -> None:
    write_hub_folder(tmp_path, "x", np.zeros((0, 3, 8, 8), np.uint8), [], class_names=["a"])
    with pytest.raises(DataSourceError, match=r"x/test has 0 images.*selects none"):
        load_images(tmp_path)


def _readme(folder: Path, yaml_header: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "README.md").write_text(f"---\n{textwrap.dedent(yaml_header)}---\n# card\n")


def test_readme_pattern_matching_nothing_fails_only_that_config(tmp_path: Path) -> None:
    write_hub_folder(tmp_path, "good", random_images(2), [0, 0], class_names=["a"])
    readme = (tmp_path / "README.md").read_text()
    broken = "- config_name: broken\n  data_files: data/broken/test-*.parquet\n"
    (tmp_path / "README.md").write_text(readme.replace("configs:\n", f"configs:\n{broken}", 1))
    assert list_configs(tmp_path) == ["broken", "good"]
    assert_same(load_images(tmp_path, config="good"), random_images(2), [0, 0])
    with pytest.raises(DataSourceError, match=r"pattern 'data/broken/test-\*\.parquet' matches no"):
        load_images(tmp_path, config="broken", split="train")


def test_readme_data_file_outside_folder(tmp_path: Path) -> None:
    write_hub_folder(tmp_path / "other", "x", random_images(2), [0, 0], class_names=["a"])
    _readme(
        tmp_path / "ds",
        "configs:\n- config_name: a\n  data_files:\n  - split: test\n"
        "    path: ../other/data/x/*.parquet\n",
    )
    with pytest.raises(DataSourceError, match=r"lies outside the dataset folder"):
        load_images(tmp_path / "ds")


def test_readme_non_parquet_data_file(tmp_path: Path) -> None:
    _readme(tmp_path, "configs:\n- config_name: a\n  data_files: [{split: test, path: x.csv}]\n")
    (tmp_path / "x.csv").write_text("image,label\n")
    with pytest.raises(DataSourceError, match=r"x\.csv' is not parquet"):
        load_images(tmp_path)


def test_readme_malformed_entries(tmp_path: Path) -> None:
    _readme(tmp_path, "configs:\n- config_name: a\n")
    with pytest.raises(DataSourceError, match=r"needs `config_name` and `data_files`"):
        list_configs(tmp_path)
    _readme(tmp_path, "configs: {a: 1}\n")
    with pytest.raises(DataSourceError, match=r"`configs:` must be a list"):
        list_configs(tmp_path)
    _readme(tmp_path, "configs: [\n")
    with pytest.raises(DataSourceError, match=r"cannot parse the YAML header"):
        list_configs(tmp_path)


def test_readme_data_files_string_and_dict_forms(tmp_path: Path) -> None:
    write_hub_folder(tmp_path, "x", random_images(2, seed=9), [0, 1], class_names=["a", "b"])
    shard = "data/x/test-00000-of-00001.parquet"
    _readme(
        tmp_path,
        f"configs:\n- config_name: s\n  data_files: {shard}\n"
        f"- config_name: d\n  data_files: {{test: [{shard}]}}\n",
    )
    assert list_configs(tmp_path) == ["s", "d"]
    assert_same(load_images(tmp_path, config="s", split="train"), random_images(2, seed=9), [0, 1])
    assert_same(load_images(tmp_path, config="d"), random_images(2, seed=9), [0, 1])
