"""Which benchmark ``certbench train`` writes into the manifest (issue 25 §3: the README's
``--dataset data/digits`` wrote ``"digits"``, so ``submit`` was refused with benchmark_mismatch).
The demo data's card names its benchmark; explicit ``--benchmark`` wins; other folders keep their
name and Hub ids stay as typed."""

from __future__ import annotations

from pathlib import Path

import pytest

from certbench.data import card_benchmark, write_demo_dataset
from certbench.data.writer import write_card
from certbench.training.submission import benchmark_name


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> Path:
    return write_demo_dataset(tmp_path_factory.mktemp("data") / "digits").out


def test_the_demo_data_belongs_to_the_demo_benchmark(digits: Path) -> None:
    assert card_benchmark(digits) == "demo-digits"
    assert benchmark_name(str(digits), None) == "demo-digits"
    assert benchmark_name(str(digits), "cifar10") == "cifar10"


def test_a_demo_folder_written_before_the_key_is_recognised_by_its_title(
    digits: Path, tmp_path: Path
) -> None:
    readme = (digits / "README.md").read_text(encoding="utf-8")
    old = tmp_path / "old-digits"
    old.mkdir()
    (old / "README.md").write_text(
        "\n".join(line for line in readme.splitlines() if "certbench_benchmark" not in line),
        encoding="utf-8",
    )
    assert "certbench_benchmark" not in (old / "README.md").read_text(encoding="utf-8")
    assert card_benchmark(old) == "demo-digits"


def test_other_folders_keep_their_name_and_hub_ids_stay_as_typed(tmp_path: Path) -> None:
    mine = tmp_path / "my-set"
    mine.mkdir()
    write_card(mine, splits=["test"], pretty_name="mine", license="mit", body="a set")
    assert card_benchmark(mine) is None and card_benchmark(tmp_path / "absent") is None
    assert benchmark_name(str(mine), None) == "my-set"
    assert benchmark_name("cifar10", None) == "cifar10"
