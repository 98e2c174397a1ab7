"""certbench.data: every source round-trips byte-exactly and every bad input gives a clear error."""

from __future__ import annotations

import io
import os
import pickle
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from data_layouts import (
    CIFAR10_CLASSES,
    CIFAR100_COARSE,
    CIFAR100_FINE,
    random_images,
    random_labels,
    write_hub_folder,
    write_torchvision_cifar,
)
from PIL import Image as PILImage

from certbench.data import list_configs, load_images, source_kind
from certbench.dataset_names import HUB_ALIASES
from certbench.errors import CertbenchError, DataSourceError
from certbench.image_set import ImageSet, Subset

N = 40


def assert_same(image_set: ImageSet, images: np.ndarray, labels: np.ndarray) -> None:
    assert image_set.images.dtype == torch.uint8
    assert image_set.labels.dtype == torch.int64
    assert image_set.indices.dtype == torch.int64
    np.testing.assert_array_equal(image_set.images.numpy(), images)
    np.testing.assert_array_equal(image_set.labels.numpy(), labels)


# ----------------------------------------------------------------------------- Subset


def test_subset_every_skip_th_then_first_limit() -> None:
    np.testing.assert_array_equal(Subset().positions(5), [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(Subset(skip=3).positions(10), [0, 3, 6, 9])
    np.testing.assert_array_equal(Subset(skip=3, limit=2).positions(10), [0, 3])
    assert len(Subset(skip=20).positions(10_000)) == 500  # the protocol's subset


@pytest.mark.parametrize("kwargs", [{"skip": 0}, {"skip": -2}, {"skip": 1.5}, {"limit": 0}])
def test_subset_rejects_bad_values(kwargs: dict) -> None:
    with pytest.raises(DataSourceError, match="Subset"):
        Subset(**kwargs)


# ----------------------------------------------------------------------------- torchvision layout


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


# ----------------------------------------------------------------------------- Hub-layout folder


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


@pytest.mark.parametrize(
    ("mode", "found"), [("L", r"mode L \(1 channel"), ("RGBA", r"mode RGBA \(4 channel")]
)
def test_hub_folder_wrong_channel_count(tmp_path: Path, mode: str, found: str) -> None:
    pictures = [PILImage.new(mode, (32, 32)) for _ in range(3)]
    write_hub_folder(tmp_path, "bad", pictures, [0, 1, 0], class_names=["a", "b"])
    with pytest.raises(DataSourceError, match=rf"row 0 has {found}.*3-channel"):
        load_images(tmp_path)


def test_hub_folder_mixed_image_sizes(tmp_path: Path) -> None:
    pictures = [PILImage.new("RGB", (32, 32)), PILImage.new("RGB", (32, 32))]
    pictures.append(PILImage.new("RGB", (28, 30)))
    write_hub_folder(tmp_path, "bad", pictures, [0, 1, 0], class_names=["a", "b"])
    with pytest.raises(DataSourceError, match=r"row 2 is 28x30 but the first is 32x32"):
        load_images(tmp_path)


def test_palette_and_jpeg_images_decode_to_rgb(tmp_path: Path) -> None:
    rgb = [PILImage.fromarray(img.transpose(1, 2, 0)) for img in random_images(2, size=8)]
    palette = _encoded(rgb[0].convert("P"), "PNG")  # RGB palette: converting is lossless
    jpeg = _encoded(rgb[1], "JPEG")
    path = write_hub_folder(tmp_path, "x", [palette, jpeg], [0, 1], class_names=["a", "b"])
    stored = pq.read_table(path).column("image").to_pylist()
    assert [PILImage.open(_io(c["bytes"])).format for c in stored] == ["PNG", "JPEG"]
    image_set = load_images(tmp_path)
    jpeg_pixels = np.asarray(PILImage.open(_io(stored[1]["bytes"])))  # as stored (re-encoded)
    expected = [np.asarray(palette.convert("RGB")), jpeg_pixels]
    np.testing.assert_array_equal(
        image_set.images.numpy(), np.stack(expected).transpose(0, 3, 1, 2)
    )


def _encoded(image: PILImage.Image, image_format: str) -> PILImage.Image:
    """``image`` re-opened from its encoding, so datasets stores the bytes in that format."""
    buffer = io.BytesIO()
    image.save(buffer, format=image_format)
    return PILImage.open(_io(buffer.getvalue()))


def _io(blob: bytes) -> io.BytesIO:
    return io.BytesIO(blob)


def test_hub_folder_image_without_bytes(tmp_path: Path) -> None:
    path = write_hub_folder(tmp_path, "x", random_images(2), [0, 1], class_names=["a", "b"])
    image_type = pq.read_table(path).schema.field("image").type
    only_paths = pa.array([{"bytes": _png(), "path": None}, {"bytes": None, "path": "b.png"}])
    _rewrite_column(path, "image", only_paths.cast(image_type))
    with pytest.raises(DataSourceError, match=r"row 1 has no embedded bytes"):
        load_images(tmp_path)


def test_non_square_rgb_images_are_fine(tmp_path: Path) -> None:
    images = np.random.default_rng(0).integers(0, 256, (4, 3, 20, 24), dtype=np.uint8)
    write_hub_folder(tmp_path, "rect", images, [0, 1, 0, 1], class_names=["a", "b"])
    assert_same(load_images(tmp_path), images, [0, 1, 0, 1])


def _rewrite_column(path: Path, column: str, values: pa.Array) -> None:
    """Replace one column of a parquet file, keeping the datasets schema metadata."""
    table = pq.read_table(path)
    index = table.column_names.index(column)
    pq.write_table(table.set_column(index, table.schema.field(index), values), path)


def test_hub_folder_label_out_of_range(tmp_path: Path) -> None:
    path = write_hub_folder(tmp_path, "x", random_images(3), [0, 1, 0], class_names=["a", "b"])
    _rewrite_column(path, "label", pa.array([0, 1, 2], pa.int64()))
    with pytest.raises(DataSourceError, match=r"labels range from 0 to 2.*only 2 class names"):
        load_images(tmp_path)


def test_hub_folder_missing_labels(tmp_path: Path) -> None:
    path = write_hub_folder(tmp_path, "x", random_images(3), [0, 1, 0], class_names=["a", "b"])
    _rewrite_column(path, "label", pa.array([0, None, 1], pa.int64()))
    with pytest.raises(DataSourceError, match=r"'label' must hold integers.*1 missing"):
        load_images(tmp_path)


def test_hub_folder_label_without_class_names(tmp_path: Path) -> None:
    table = pa.table({"image": [{"bytes": _png(), "path": None}], "label": [0]})
    (tmp_path / "test.parquet").write_bytes(b"")
    pq.write_table(table, tmp_path / "test.parquet")
    with pytest.raises(DataSourceError, match=r"'label' has no class names.*ClassLabel"):
        load_images(tmp_path)


def _png() -> bytes:
    buffer = io.BytesIO()
    PILImage.new("RGB", (4, 4)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_hub_folder_corrupt_image_bytes(tmp_path: Path) -> None:
    path = write_hub_folder(tmp_path, "x", random_images(2), [0, 1], class_names=["a", "b"])
    table = pq.read_table(path)
    broken = pa.array(
        [{"bytes": b"\x89PNG broken", "path": None}] * 2, table.schema.field("image").type
    )
    _rewrite_column(path, "image", broken)
    with pytest.raises(DataSourceError, match=r"cannot decode the image at row 0"):
        load_images(tmp_path)


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


# ----------------------------------------------------------------------------- Hub datasets


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
    from certbench.hub_datasets import load_hub

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


# ----------------------------------------------------------------------------- source errors


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


def test_org_name_is_a_hub_id_and_local_names_win(cifar_root: Path) -> None:
    """``org/name`` still means the Hub; an existing folder named like an alias is local."""
    assert source_kind("some-org/cifr10") == ("hub", "some-org/cifr10")
    assert source_kind("cifar10") == ("hub", HUB_ALIASES["cifar10"])
    assert source_kind(cifar_root)[0] == "torchvision"


def test_file_instead_of_folder(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(DataSourceError, match=r"is a file; pass the folder"):
        load_images(tmp_path / "f.txt")


def test_folder_that_is_not_a_dataset(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(DataSourceError, match=r"is not a dataset.*cifar-10-batches-py"):
        load_images(tmp_path)


def test_revision_for_local_folder(cifar_root: Path) -> None:
    with pytest.raises(DataSourceError, match=r"revision='v1' only applies to Hub datasets"):
        load_images(cifar_root, config="cifar10", revision="v1")


def test_errors_are_catchable_as_certbench_errors(tmp_path: Path) -> None:
    with pytest.raises(CertbenchError):
        load_images(tmp_path / "nowhere")


@pytest.mark.slow  # a fresh interpreter importing torch and datasets: ~10 s on 2 busy cores
def test_offline_hub_gives_clear_error() -> None:
    """No network here: every Hub path must fail with advice, never a raw traceback."""
    script = textwrap.dedent(
        """
        from certbench.data import list_configs, load_images
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
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
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


# ----------------------------------------------------------------------------- ImageSet


def _image_set(**changes: object) -> ImageSet:
    fields: dict = {
        "name": "t",
        "images": torch.zeros(2, 3, 4, 4, dtype=torch.uint8),
        "labels": torch.tensor([0, 1]),
        "indices": torch.tensor([5, 9]),
        "class_names": ("a", "b"),
    }
    return ImageSet(**{**fields, **changes})


def test_image_set_as_float() -> None:
    images = torch.tensor([0, 51, 255], dtype=torch.uint8).view(1, 3, 1, 1).repeat(2, 1, 1, 1)
    floats = _image_set(images=images).as_float()
    assert floats.dtype == torch.float32
    assert torch.allclose(floats[0, :, 0, 0], torch.tensor([0.0, 0.2, 1.0]), atol=1e-7)
    assert images.dtype == torch.uint8 and int(images.max()) == 255  # source untouched


def test_image_set_class_names_become_tuples() -> None:
    image_set = _image_set(
        class_names=["a", "b"], coarse_labels=torch.tensor([0, 0]), coarse_class_names=["x"]
    )
    assert image_set.class_names == ("a", "b")
    assert image_set.coarse_class_names == ("x",)
    assert len(image_set) == 2


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"images": torch.zeros(2, 3, 4, 4)}, "uint8 tensor"),
        ({"images": torch.zeros(2, 1, 4, 4, dtype=torch.uint8)}, r"\(N, 3, H, W\)"),
        ({"images": torch.zeros(0, 3, 4, 4, dtype=torch.uint8)}, "has no images"),
        ({"labels": torch.tensor([0])}, "1 labels for 2 images"),
        ({"labels": torch.tensor([0, 2])}, "labels range from 0 to 2"),
        ({"labels": torch.tensor([0, 1], dtype=torch.int32)}, "1-D int64"),
        ({"indices": torch.tensor([1, 2, 3])}, "3 indices for 2 images"),
        ({"coarse_labels": torch.tensor([0, 0])}, "given together"),
        ({"extra": {"f_c": np.zeros(3)}}, "'f_c' has 3 values for 2 images"),
    ],
)
def test_image_set_validation(changes: dict, message: str) -> None:
    with pytest.raises(DataSourceError, match=message):
        _image_set(**changes)
