"""Content hashes that pin a test set, and source names that never carry a local path."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from certbench.data.provenance import (
    config_sha256,
    find_local_paths,
    public_name,
    public_source,
)
from certbench.errors import DataSourceError
from tests.support.data_layouts import (
    CIFAR10_CLASSES,
    random_images,
    random_labels,
    write_hub_folder,
    write_torchvision_cifar,
)


def folder_with_configs(root: Path) -> Path:
    images, labels = random_images(6), random_labels(6, 10)
    write_hub_folder(root, "fog_s1", images, labels, class_names=CIFAR10_CLASSES)
    write_hub_folder(root, "fog_s2", images[::-1].copy(), labels, class_names=CIFAR10_CLASSES)
    return root


def test_config_hash_is_the_shard_sha256_and_sees_one_changed_byte(tmp_path: Path) -> None:
    root = folder_with_configs(tmp_path / "bench")
    shard = root / "data" / "fog_s1" / "test-00000-of-00001.parquet"
    digest = config_sha256(root, "fog_s1")
    assert digest == hashlib.sha256(shard.read_bytes()).hexdigest()
    assert digest != config_sha256(root, "fog_s2")
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 1
    shard.write_bytes(bytes(data))
    assert config_sha256(root, "fog_s1") != digest


def test_several_shards_hash_their_sorted_manifest(tmp_path: Path) -> None:
    root = tmp_path / "bench"
    first = write_hub_folder(root, "fog_s1", random_images(4), random_labels(4, 10),
                             class_names=CIFAR10_CLASSES)  # fmt: skip
    second = first.with_name("test-00001-of-00002.parquet")
    second.write_bytes(first.read_bytes())
    readme = root / "README.md"
    readme.write_text(readme.read_text().replace("test-00000-of-00001.parquet", "test-*.parquet"))
    lines = "".join(
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  data/fog_s1/{p.name}\n"
        for p in (first, second)
    )
    assert config_sha256(root, "fog_s1") == hashlib.sha256(lines.encode()).hexdigest()


def test_hash_of_a_non_hub_folder_or_unknown_config_is_a_clear_error(tmp_path: Path) -> None:
    root = folder_with_configs(tmp_path / "bench")
    with pytest.raises(DataSourceError, match="unknown config 'snow_s1'"):
        config_sha256(root, "snow_s1")
    cifar = tmp_path / "cifar"
    write_torchvision_cifar(cifar, "cifar10", random_images(3), random_labels(3, 10))
    with pytest.raises(DataSourceError, match="not a local Hub-layout folder"):
        config_sha256(cifar, "cifar10")


def test_sources_are_named_without_local_paths(tmp_path: Path) -> None:
    assert public_source("cifar10", "abc123") == {
        "source": "uoft-cs/cifar10",
        "source_revision": "abc123",
    }
    assert public_source("my-org/cifar10-f")["source_revision"] == "unpinned"
    cifar = tmp_path / "cifar"
    write_torchvision_cifar(cifar, "cifar10", random_images(3), random_labels(3, 10))
    assert public_source(cifar) == {"source": "local torchvision CIFAR folder"}
    assert public_source(folder_with_configs(tmp_path / "b")) == {
        "source": "local Hub-layout folder"
    }
    assert public_name("cifar10") == "cifar10" and public_name("org/name") == "org/name"
    assert public_name(str(cifar)) == public_name("./data") == "a local folder"


@pytest.mark.parametrize(
    "text,found",
    [
        ("source: /tmp/pytest-3/src", ["/tmp/pytest-3/src"]),
        ("Imported from `/home/alice/CIFAR-10-C`.", ["/home/alice/CIFAR-10-C"]),
        ("see ~/data/cifar", ["~/data"]),
        ("C:\\Users\\bob\\cifar", ["C:\\Users\\bob\\cifar"]),
        ("https://arxiv.org/abs/2207.00421, images/grid.png, ε = 8/255, 1/f, n/a", []),
    ],
)
def test_local_paths_are_found_in_text_and_urls_are_not(text: str, found: list[str]) -> None:
    assert find_local_paths(text) == found


def test_the_default_revision_of_a_pinned_hub_source_is_its_commit(tmp_path, monkeypatch):
    from certbench.data.pins import CIFAR10, CIFAR100, default_revision, pinned_source

    assert default_revision("cifar10", None) == CIFAR10.commit
    assert default_revision("uoft-cs/cifar100", None) == CIFAR100.commit
    assert default_revision("cifar10", "main") == "main"
    assert default_revision("certbench/cifar10-f", None) is None
    assert pinned_source("uoft-cs/cifar10") is CIFAR10 and CIFAR100.sha256("train") is None
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cifar10").mkdir()  # a local folder of that name is not the Hub repo
    assert default_revision("cifar10", None) is None
