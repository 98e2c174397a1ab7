"""The demo data set (scikit-learn digits, 32×32 RGB, train/test) in the Hub layout."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import typer
from sklearn.datasets import load_digits
from typer.testing import CliRunner

from certbench.cli.datasets import register
from certbench.data import demo as demo_module
from certbench.data.demo import TEST_EVERY, UPSCALE, demo_images, write_demo_dataset
from certbench.data.sources import load_images
from certbench.errors import DataSourceError
from tests.support import timing


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    return write_demo_dataset(out)


def test_both_splits_load_with_load_images(demo):
    train = load_images(demo.out, split="train")
    test = load_images(demo.out, split="test")
    digits = load_digits()
    assert len(train) + len(test) == len(digits.target)
    assert demo.counts == {"train": len(train), "test": len(test)}
    for split in (train, test):
        assert split.images.shape[1:] == (3, 32, 32)
        assert split.class_names == tuple(str(d) for d in range(10))
    indices = np.concatenate([train.indices.numpy(), test.indices.numpy()])
    assert sorted(indices.tolist()) == list(range(len(digits.target)))
    np.testing.assert_array_equal(test.labels.numpy(), digits.target[test.indices.numpy()])


def test_split_is_every_fifth_image_of_each_class(demo):
    test = load_images(demo.out, split="test")
    target = load_digits().target
    for digit in range(10):
        members = np.flatnonzero(target == digit)
        chosen = np.sort(test.indices.numpy()[test.labels.numpy() == digit])
        np.testing.assert_array_equal(chosen, members[::TEST_EVERY])


def test_pixels_are_the_scaled_8x8_values_in_4x4_blocks_on_three_channels(demo):
    train = load_images(demo.out, split="train")
    raw = load_digits().images
    for row in (0, 100, len(train) - 1):
        image = train.images[row].numpy()
        source = raw[int(train.indices[row])]
        expected = np.floor(source * 255 / 16 + 0.5).astype(np.uint8)
        blocks = image[:, ::UPSCALE, ::UPSCALE]
        assert np.array_equal(image, np.repeat(np.repeat(blocks, UPSCALE, 1), UPSCALE, 2))
        assert all(np.array_equal(blocks[c], expected) for c in range(3))
    assert train.images.max() == 255 and train.images.min() == 0


def test_writing_twice_gives_the_same_data(demo, tmp_path):
    again = write_demo_dataset(tmp_path / "again")
    assert again.sha256 == demo.sha256
    for split in ("train", "test"):
        a, b = load_images(demo.out, split=split), load_images(again.out, split=split)
        assert a.images.equal(b.images) and a.labels.equal(b.labels) and a.indices.equal(b.indices)
    images, labels = demo_images()
    assert images.shape == (len(labels), 3, 32, 32) and images.dtype == np.uint8


def test_cli_writes_the_data_set(tmp_path):
    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(app, ["datasets", "demo", "--out", str(tmp_path / "d")])
    assert result.exit_code == 0, result.output
    assert "train 1433" in result.output and "test 364" in result.output
    assert len(load_images(tmp_path / "d", split="test")) == 364


def test_cli_refuses_a_file_as_output(tmp_path):
    app = typer.Typer()
    register(app)
    (tmp_path / "f").write_text("x")
    result = CliRunner().invoke(app, ["datasets", "demo", "--out", str(tmp_path / "f")])
    assert result.exit_code == 2 and "is a file" in result.output


def test_certbench_demo_modules_import_nothing_from_generators_and_no_torch():
    code = (
        "import sys, typer; import certbench.data.demo, certbench.data.writer; "
        "from certbench.cli.datasets import register; register(typer.Typer()); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'generators', 'api', 'workers', "
        "'models', 'torch'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_digits_file_is_what_load_digits_returns():
    values, target = demo_module._digits()
    digits = load_digits()
    np.testing.assert_array_equal(values, digits.images)
    np.testing.assert_array_equal(target, digits.target)
    assert target.dtype == np.int64


def test_building_the_demo_images_does_not_import_scikit_learn():
    """Its import cost 6 s of every first start of serve (scipy and more come with it)."""
    probe = (
        "import sys\n"
        "from certbench.data.demo import demo_images\n"
        "images, labels = demo_images()\n"
        "assert images.shape == (1797, 3, 32, 32), images.shape\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sklearn', 'scipy')))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=timing.seconds(120)
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_a_missing_digits_file_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(demo_module, "DIGITS_FILE", ("no", "such", "digits.csv.gz"))
    with pytest.raises(DataSourceError, match="reinstall scikit-learn"):
        demo_module.demo_images()
