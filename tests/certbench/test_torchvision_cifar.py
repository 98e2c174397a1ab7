"""certbench.data.torchvision_cifar: torchvision CIFAR folders round-trip byte-exactly, the
restricted unpickler refuses code, and every malformed file gives a clear error."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from certbench.data.image_set import Subset
from certbench.data.names import HUB_ALIASES
from certbench.data.sources import list_configs, load_images, source_kind
from certbench.errors import DataSourceError
from tests.support.data_layouts import (
    CIFAR10_CLASSES,
    CIFAR100_COARSE,
    CIFAR100_FINE,
    assert_same,
    random_images,
    random_labels,
    write_torchvision_cifar,
)

N = 40


@pytest.fixture(scope="module")
def cifar_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with both torchvision CIFAR layouts, train and test splits."""
    root = tmp_path_factory.mktemp("tv")
    write_torchvision_cifar(root, "cifar10", random_images(N, seed=1), random_labels(N, 10))
    write_torchvision_cifar(
        root, "cifar10", random_images(N, seed=2), random_labels(N, 10, seed=2), split="train"
    )
    write_torchvision_cifar(
        root,
        "cifar100",
        random_images(N, seed=3),
        random_labels(N, 100, seed=3),
        coarse_labels=random_labels(N, 20, seed=4),
    )
    return root


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_cifar10_round_trip_all_pickle_protocols(tmp_path: Path, protocol: int) -> None:
    images, labels = random_images(N, seed=protocol), random_labels(N, 10, seed=protocol)
    folder = write_torchvision_cifar(tmp_path, "cifar10", images, labels, protocol=protocol)
    for source in (folder, tmp_path, str(tmp_path)):  # the folder itself or its parent
        image_set = load_images(source)
        assert_same(image_set, images, labels)
        np.testing.assert_array_equal(image_set.indices.numpy(), np.arange(N))
        assert image_set.class_names == CIFAR10_CLASSES
        assert image_set.coarse_labels is None and image_set.coarse_class_names is None
        assert image_set.extra == {}
        assert image_set.name == "cifar10/test"


def test_cifar10_train_concatenates_five_batches_in_order(cifar_root: Path) -> None:
    batches = sorted((cifar_root / "cifar-10-batches-py").glob("data_batch_*"))
    assert [b.name for b in batches] == [f"data_batch_{i}" for i in range(1, 6)]
    image_set = load_images(cifar_root, config="cifar10", split="train")
    assert_same(image_set, random_images(N, seed=2), random_labels(N, 10, seed=2))
    assert image_set.name == "cifar10/train"


def test_cifar100_fine_and_coarse_labels(cifar_root: Path) -> None:
    image_set = load_images(cifar_root / "cifar-100-python", subset=Subset(skip=7, limit=3))
    rows = np.array([0, 7, 14])
    assert_same(image_set, random_images(N, seed=3)[rows], random_labels(N, 100, seed=3)[rows])
    np.testing.assert_array_equal(image_set.indices.numpy(), rows)
    assert image_set.coarse_labels is not None
    np.testing.assert_array_equal(
        image_set.coarse_labels.numpy(), random_labels(N, 20, seed=4)[rows]
    )
    assert image_set.class_names == CIFAR100_FINE
    assert image_set.coarse_class_names == CIFAR100_COARSE


def test_torchvision_subset_indices_are_source_positions(cifar_root: Path) -> None:
    image_set = load_images(cifar_root, config="cifar10", subset=Subset(skip=20))
    np.testing.assert_array_equal(image_set.indices.numpy(), [0, 20])
    assert_same(image_set, random_images(N, seed=1)[[0, 20]], random_labels(N, 10)[[0, 20]])


def test_torchvision_configs_and_ambiguity(cifar_root: Path) -> None:
    assert list_configs(cifar_root) == ["cifar10", "cifar100"]
    assert list_configs(cifar_root / "cifar-10-batches-py") == ["cifar10"]
    with pytest.raises(DataSourceError, match=r"several CIFAR datasets.*config="):
        load_images(cifar_root)
    with pytest.raises(DataSourceError, match=r"unknown config 'cifar1000'.*cifar10"):
        load_images(cifar_root, config="cifar1000")
    with pytest.raises(DataSourceError, match=r"unknown split 'validation'.*\['test', 'train'\]"):
        load_images(cifar_root, config="cifar10", split="validation")


def test_torchvision_missing_batch_file(tmp_path: Path) -> None:
    write_torchvision_cifar(tmp_path, "cifar10", random_images(4), random_labels(4, 10))
    with pytest.raises(DataSourceError, match=r"data_batch_1.*missing"):
        load_images(tmp_path, split="train")


@pytest.mark.parametrize(
    "payload",
    [b"", b"not a pickle at all", pickle.dumps({"data": 1}, protocol=2)[:-5]],
    ids=["empty", "garbage", "truncated"],
)
def test_corrupt_pickle(tmp_path: Path, payload: bytes) -> None:
    folder = write_torchvision_cifar(tmp_path, "cifar10", random_images(4), random_labels(4, 10))
    (folder / "test_batch").write_bytes(payload)
    with pytest.raises(DataSourceError, match=r"cannot read torchvision CIFAR file.*test_batch"):
        load_images(folder)


class _Exploit:
    """Unpickling this would call os.system; the restricted unpickler must refuse it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def test_restricted_unpickler_refuses_code(tmp_path: Path) -> None:
    folder = write_torchvision_cifar(tmp_path, "cifar10", random_images(4), random_labels(4, 10))
    marker = tmp_path / "pwned"
    (folder / "test_batch").write_bytes(
        pickle.dumps({"data": _Exploit(marker), "labels": [0]}, protocol=2)
    )
    with pytest.raises(DataSourceError, match=r"global posix\.system is not allowed"):
        load_images(folder)
    assert not marker.exists()


def test_pickle_that_is_not_a_dict(tmp_path: Path) -> None:
    folder = write_torchvision_cifar(tmp_path, "cifar10", random_images(4), random_labels(4, 10))
    (folder / "test_batch").write_bytes(pickle.dumps([1, 2, 3], protocol=2))
    with pytest.raises(DataSourceError, match="holds a list, expected a dict"):
        load_images(folder)


def test_torchvision_wrong_image_size(tmp_path: Path) -> None:
    gray = np.zeros((4, 1, 32, 32), np.uint8)  # one channel: rows of 1024 values
    write_torchvision_cifar(tmp_path, "cifar10", gray, random_labels(4, 10))
    with pytest.raises(DataSourceError, match=r"shape \(N, 3072\).*found shape \(4, 1024\)"):
        load_images(tmp_path)


def test_torchvision_wrong_dtype(tmp_path: Path) -> None:
    folder = write_torchvision_cifar(tmp_path, "cifar10", random_images(4), random_labels(4, 10))
    batch = {"data": np.zeros((4, 3072), np.float32), "labels": [0, 1, 2, 3]}
    (folder / "test_batch").write_bytes(pickle.dumps(batch, protocol=2))
    with pytest.raises(DataSourceError, match=r"uint8 numpy array, found float32"):
        load_images(folder)


def test_torchvision_label_count_mismatch(tmp_path: Path) -> None:
    write_torchvision_cifar(tmp_path, "cifar10", random_images(5), [0, 1, 2])
    with pytest.raises(DataSourceError, match=r"3 labels for 5 images"):
        load_images(tmp_path)


def test_torchvision_label_out_of_range(tmp_path: Path) -> None:
    write_torchvision_cifar(tmp_path, "cifar10", random_images(3), [0, 10, 2])
    with pytest.raises(DataSourceError, match=r"labels range from 0 to 10.*10 class names"):
        load_images(tmp_path)


def test_torchvision_coarse_label_out_of_range(tmp_path: Path) -> None:
    write_torchvision_cifar(
        tmp_path, "cifar100", random_images(3), [0, 1, 2], coarse_labels=[0, 20, 1]
    )
    with pytest.raises(DataSourceError, match=r"coarse_labels range from 0 to 20"):
        load_images(tmp_path)


def test_torchvision_missing_label_key(tmp_path: Path) -> None:
    folder = write_torchvision_cifar(tmp_path, "cifar10", random_images(2), [0, 1])
    (folder / "test_batch").write_bytes(
        pickle.dumps({"data": np.zeros((2, 3072), np.uint8)}, protocol=2)
    )
    with pytest.raises(DataSourceError, match=r"no 'labels' entry; found keys \['data'\]"):
        load_images(folder)


def test_torchvision_empty_split(tmp_path: Path) -> None:
    write_torchvision_cifar(tmp_path, "cifar10", np.zeros((0, 3, 32, 32), np.uint8), [])
    with pytest.raises(DataSourceError, match=r"has 0 images.*selects none"):
        load_images(tmp_path)


def test_org_name_is_a_hub_id_and_local_names_win(cifar_root: Path) -> None:
    """``org/name`` still means the Hub; an existing folder named like an alias is local."""
    assert source_kind("some-org/cifr10") == ("hub", "some-org/cifr10")
    assert source_kind("cifar10") == ("hub", HUB_ALIASES["cifar10"])
    assert source_kind(cifar_root)[0] == "torchvision"


def test_revision_for_local_folder(cifar_root: Path) -> None:
    with pytest.raises(DataSourceError, match=r"revision='v1' only applies to Hub datasets"):
        load_images(cifar_root, config="cifar10", revision="v1")
