"""`certbench import cifar-c` and `certbench generate cifar-c|cifar-c-bar|weather` end to end:
a small written-by-the-test release round-trips through the Hub layout; generation writes the
layout, resumes, and loads with `datasets`; clear errors for broken releases."""

from __future__ import annotations

from pathlib import Path

import datasets
import numpy as np
import pytest
from typer.testing import CliRunner

from certbench.cli.app import app, register_plugins
from certbench.data.sources import load_images
from certbench.errors import DataSourceError
from generators import hub
from generators.cifar_c_import import CIFAR10_CLASSES, import_cifar_c
from generators.corruptions_c import corrupt
from tests.support.data_layouts import write_torchvision_cifar

N = 12
register_plugins(app)
runner = CliRunner()


def _clean(n: int = N) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8), rng.integers(0, 10, n)


def write_release(folder: Path, names=("gaussian_noise", "fog")) -> tuple[np.ndarray, dict]:
    """A miniature official release: labels.npy (5N,) and {name}.npy (5N, 32, 32, 3)."""
    folder.mkdir(parents=True, exist_ok=True)
    clean, labels = _clean()
    np.save(folder / "labels.npy", np.tile(labels, 5).astype(np.uint8))
    arrays = {}
    for name in names:
        blocks = [corrupt(clean, name, s, seed=9) for s in range(1, 6)]
        arrays[name] = np.concatenate(blocks)
        np.save(folder / f"{name}.npy", arrays[name])
    return labels, arrays


def test_import_round_trips_pixels_labels_and_metadata(tmp_path: Path) -> None:
    labels, arrays = write_release(tmp_path / "CIFAR-10-C")
    out = tmp_path / "hub"
    result = runner.invoke(
        app,
        [
            "import",
            "cifar-c",
            "--src",
            str(tmp_path / "CIFAR-10-C"),
            "--out",
            str(out),
            "--corruptions",
            "gaussian_noise,fog",
        ],
    )
    assert result.exit_code == 0, result.output
    assert sorted(hub.list_configs(out)) == sorted(
        f"{n}_s{s}" for n in ("gaussian_noise", "fog") for s in range(1, 6)
    )
    for name in ("gaussian_noise", "fog"):
        for level in (1, 4):
            ds = datasets.load_dataset(str(out), f"{name}_s{level}", split="test")
            pixels = np.stack([np.asarray(img) for img in ds["image"]])
            np.testing.assert_array_equal(pixels, arrays[name][(level - 1) * N : level * N])
            assert ds["label"] == labels.tolist()
            assert ds.features["label"].names == list(CIFAR10_CLASSES)
            assert set(ds["corruption"]) == {name} and set(ds["severity"]) == {level}
            assert ds["source_index"] == list(range(N))
    assert "gaussian_noise_s3" in (out / "README.md").read_text()
    again = runner.invoke(
        app,
        [
            "import",
            "cifar-c",
            "--src",
            str(tmp_path / "CIFAR-10-C"),
            "--out",
            str(out),
            "--corruptions",
            "gaussian_noise,fog",
        ],
    )
    assert "skipped 10 already complete" in again.output


def test_import_with_clean_images_assigns_bands(tmp_path: Path) -> None:
    write_release(tmp_path / "rel", names=("gaussian_noise",))
    clean, labels = _clean()
    root = write_torchvision_cifar(
        tmp_path / "clean", "cifar10", clean.transpose(0, 3, 1, 2), labels
    )
    report = import_cifar_c(
        tmp_path / "rel",
        tmp_path / "hub",
        dataset="cifar10",
        corruptions=["gaussian_noise"],
        severities=[3],
        clean=load_images(root),
    )
    assert report.written == ["gaussian_noise_s3"]
    ds = datasets.load_dataset(str(tmp_path / "hub"), "gaussian_noise_s3", split="test")
    assert set(ds["band"]) == {"high"}
    assert "Agreement with the hand grouping" in (tmp_path / "hub" / "README.md").read_text()


def test_import_errors_are_clear_and_leave_nothing(tmp_path: Path) -> None:
    rel = tmp_path / "rel"
    write_release(rel, names=("gaussian_noise",))
    out = tmp_path / "hub"
    with pytest.raises(DataSourceError, match=r"fog.npy is missing"):
        import_cifar_c(rel, out, dataset="cifar10", corruptions=["gaussian_noise", "fog"])
    assert not out.exists()  # every file is checked before anything is written
    np.save(rel / "fog.npy", np.zeros((5 * N, 32, 32), np.uint8))
    with pytest.raises(DataSourceError, match=r"shape \(60, 32, 32, 3\)"):
        import_cifar_c(rel, out, dataset="cifar10", corruptions=["fog"])
    np.save(rel / "labels.npy", np.arange(7))
    with pytest.raises(DataSourceError, match="5 \\* N labels"):
        import_cifar_c(rel, out, dataset="cifar10")
    with pytest.raises(DataSourceError, match="not a folder"):
        import_cifar_c(tmp_path / "nope", out, dataset="cifar10")
    result = runner.invoke(
        app, ["import", "cifar-c", "--src", str(tmp_path / "nope"), "--out", str(out)]
    )
    assert result.exit_code == 2 and "not a folder" in result.output


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "names"),
    [
        ("cifar-c", "gaussian_noise,glass_blur"),
        ("cifar-c-bar", "lines,ripple"),
        ("weather", "rain,snow"),
    ],
)
def test_generate_writes_resumes_and_loads(tmp_path: Path, command: str, names: str) -> None:
    clean, labels = _clean(16)
    root = write_torchvision_cifar(tmp_path / "src", "cifar10", clean.transpose(0, 3, 1, 2), labels)
    out = tmp_path / command
    args = [
        "generate",
        command,
        "--dataset",
        "cifar10",
        "--source",
        str(root),
        "--out",
        str(out),
        "--corruptions",
        names,
        "--severities",
        "1,3",
        "--limit",
        "10",
        "--seed",
        "4",
        "--batch-size",
        "4",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    first, level = names.split(",")[0], 3
    config = f"{first}_s{level}"
    assert hub.config_complete(out, config)
    ds = datasets.load_dataset(str(out), config, split="test")
    pixels = np.stack([np.asarray(img) for img in ds["image"]])
    assert pixels.shape == (10, 32, 32, 3) and ds["label"] == labels[:10].tolist()
    assert set(ds["band"]) <= {"low", "mid", "high"} and set(ds["severity"]) == {3}
    # the same images from the library API with any batching
    from generators import corruption_sets as cs

    direct = cs.benchmark(command).apply(clean[:10], first, level, 4, np.arange(10))
    np.testing.assert_array_equal(pixels, direct)
    readme = (out / "README.md").read_text()
    assert config in readme and (out / "images" / "sample_grid.png").is_file()
    assert (out / "images" / "spectra_grid.png").is_file()
    again = runner.invoke(app, args)
    assert "skipped 4 already complete" in again.output
    bad = runner.invoke(app, [*args[:8], "--corruptions", "nope"])
    assert bad.exit_code == 2 and "--corruptions nope" in bad.output
