"""Frost on the official photographs (--frost-dir) and the card's statement of the stand-in."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer
from PIL import Image
from typer.testing import CliRunner

from certbench.errors import GeneratorError
from generators import corruption_commands, corruptions_c, hub
from generators.corruption_runs import image_rngs
from generators.frost import PHOTOGRAPHS, load_photographs, procedural_bank, shrink
from tests.support.cifar_f_sources import write_cifar10


def cv2_inter_linear(pixels: np.ndarray, fx: float) -> np.ndarray:
    """OpenCV's INTER_LINEAR resize by factor fx, written out: output pixel i samples source
    coordinate (i + 0.5)/fx − 0.5 with linear weights (clamped at the borders)."""

    def axis(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        size = round(n * fx)
        src = (np.arange(size) + 0.5) * (1.0 / fx) - 0.5
        low = np.clip(np.floor(src).astype(int), 0, n - 1)
        return low, np.clip(low + 1, 0, n - 1), src - np.floor(src)

    r0, r1, rw = axis(pixels.shape[0])
    c0, c1, cw = axis(pixels.shape[1])
    x = pixels.astype(np.float64)
    rows = x[r0] * (1 - rw)[:, None, None] + x[r1] * rw[:, None, None]
    out = rows[:, c0] * (1 - cw)[None, :, None] + rows[:, c1] * cw[None, :, None]
    return np.round(out).astype(np.uint8)


@pytest.mark.parametrize("shape", [(203, 187), (200, 200), (401, 233)])
def test_shrink_is_cv2_resize_at_one_fifth(shape: tuple[int, int]) -> None:
    pixels = np.random.default_rng(0).integers(0, 256, (*shape, 3), dtype=np.uint8)
    np.testing.assert_array_equal(shrink(pixels), cv2_inter_linear(pixels, 0.2))


def write_photographs(
    folder: Path, sizes=((240, 300), (260, 210), (200, 200), (300, 250), (222, 333))
):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    for name, (rows, cols) in zip(PHOTOGRAPHS, sizes, strict=True):
        pixels = rng.integers(0, 256, (rows, cols, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / name, quality=95)
    return folder


def test_photograph_frost_follows_the_original_draws(tmp_path: Path) -> None:
    bank = load_photographs(write_photographs(tmp_path / "frost"))
    assert bank.kind == "photographs" and len(bank.textures) == 5
    assert bank.textures[0].shape[:2] == (48, 60)  # 240×300 decimated by 5
    black = np.zeros((6, 32, 32, 3), np.uint8)
    indices = np.arange(10, 16)
    level, (c0, c1) = 4, corruptions_c.CIFAR_C["frost"].constants[3]  # black: c0·x = 0
    out = corruptions_c.corrupt(black, "frost", level, seed=3, indices=indices, frost_bank=bank)
    rngs = image_rngs(3, "cifar-c", "frost", level, indices)
    for image, rng in zip(out, rngs, strict=True):
        k = int(rng.integers(5))  # make_cifar_c.py: randint(5), randint(0, rows-32), ...
        rows, cols = bank.textures[k].shape[:2]
        top, left = rng.integers(0, rows - 32), rng.integers(0, cols - 32)
        crop = bank.textures[k][top : top + 32, left : left + 32].astype(np.float64)
        np.testing.assert_array_equal(image, np.clip(c0 * 0 + c1 * crop, 0, 255).astype(np.uint8))
    stand_in = corruptions_c.corrupt(black, "frost", level, seed=3, indices=indices)
    assert not np.array_equal(out, stand_in)
    default = corruptions_c.corrupt(
        black, "frost", level, seed=3, indices=indices, frost_bank=procedural_bank()
    )
    np.testing.assert_array_equal(default, stand_in)


def test_missing_or_tiny_photographs_are_clear_errors(tmp_path: Path) -> None:
    folder = write_photographs(tmp_path / "frost")
    (folder / "frost4.jpg").unlink()
    with pytest.raises(GeneratorError, match=r"lacks frost4\.jpg"):
        load_photographs(folder)
    small = write_photographs(tmp_path / "small", sizes=((100, 100),) * 5)
    with pytest.raises(GeneratorError, match="must exceed 32 pixels"):
        load_photographs(small)
    with pytest.raises(GeneratorError, match="is not a folder"):
        load_photographs(tmp_path / "none")


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    cli = typer.Typer()

    @cli.callback()
    def main() -> None:
        pass

    corruption_commands.register(cli)
    from generators import commands

    commands.register(cli)
    return cli


def test_frost_dir_through_the_cli_pins_the_photographs(app: typer.Typer, tmp_path: Path) -> None:
    source = write_cifar10(tmp_path / "src", n=4)
    photos = write_photographs(tmp_path / "frost")
    out = tmp_path / "out"
    args = ["generate", "cifar-c", "--dataset", "cifar10", "--source", str(source)]
    args += ["--out", str(out), "--corruptions", "frost", "--severities", "2"]
    result = CliRunner().invoke(app, [*args, "--frost-dir", str(photos)])
    assert result.exit_code == 0, result.output
    metadata = hub.read_checksum(out, "frost_s2")["metadata"]
    bank = load_photographs(photos)
    assert metadata["frost_textures"] == "photographs"
    assert metadata["frost_sha256"] == bank.sha256
    card = (out / "README.md").read_text()
    assert "official photographs" in card and bank.sha256 in card and "weaker" not in card
    # the stand-in never passes for the photographs: a run without --frost-dir regenerates
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "skipped 0" in again.output
    card = (out / "README.md").read_text()
    assert "weaker" in card and "official photographs" not in card
    assert (
        "frost_textures"
        not in json.loads((out / "data/frost_s2/checksum.json").read_text())["metadata"]
    )
