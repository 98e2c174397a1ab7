"""certbench.data.decoding: encoded images decode to exact 8-bit RGB (palettes and JPEG
included), and images or labels that do not form a valid set give a clear error."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image as PILImage

from certbench.data.sources import load_images
from certbench.errors import DataSourceError
from tests.support.data_layouts import assert_same, random_images, write_hub_folder


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
