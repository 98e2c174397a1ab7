"""Arrow rows in the ``datasets`` layout (an Image column of encoded bytes, ClassLabel columns,
metadata columns) decoded into an :class:`~certbench.data.image_set.ImageSet`.

Shared by local Hub-layout folders and Hub datasets. Decoding is vectorised per image (PIL /
numpy, never per pixel) and only the rows a :class:`~certbench.data.image_set.Subset` selects are
decoded; anything but 8-bit RGB is refused, never converted.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from PIL import Image as PILImage

from certbench.data.image_set import ImageSet
from certbench.errors import DataSourceError

if TYPE_CHECKING:
    from datasets import Features


SOURCE_INDEX = "source_index"
IMAGE_COLUMNS = ("image", "img")
LABEL_COLUMNS = ("label", "fine_label")
COARSE_COLUMN = "coarse_label"
# Encoded image formats accepted in parquet image columns; naming them spares PIL probing every
# plugin for each image (about a quarter of the decode time for 32x32 PNGs).
IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "BMP", "TIFF", "GIF")


def image_set_from_rows(
    table: pa.Table, features: Features, *, name: str, positions: np.ndarray
) -> ImageSet:
    """Decode the selected rows of a split; ``positions`` are their places in the split."""
    image_col = _image_column(table, features, name)
    label_col = next((c for c in LABEL_COLUMNS if c in table.column_names), None)
    if label_col is None:
        raise DataSourceError(
            f"{name}: no label column (one of {list(LABEL_COLUMNS)}); columns are "
            f"{table.column_names}"
        )
    images = _decode_images(table.column(image_col), name)
    labels, class_names = _class_labels(table, features, label_col, name)
    coarse = coarse_names = None
    if COARSE_COLUMN in table.column_names:
        coarse, coarse_names = _class_labels(table, features, COARSE_COLUMN, name)
    if SOURCE_INDEX in table.column_names:
        indices = _int_column(table, SOURCE_INDEX, name)
    else:
        indices = torch.from_numpy(positions)
    used = {image_col, label_col, COARSE_COLUMN, SOURCE_INDEX}
    extra = {
        col: table.column(col).to_numpy(zero_copy_only=False)
        for col in table.column_names
        if col not in used
    }
    return ImageSet(
        name=name,
        images=images,
        labels=labels,
        indices=indices,
        class_names=class_names,
        coarse_labels=coarse,
        coarse_class_names=coarse_names,
        extra=extra,
    )


def _image_column(table: pa.Table, features: Features, name: str) -> str:
    from datasets import Image

    candidates = [c for c, f in features.items() if isinstance(f, Image)]
    candidates += [c for c in IMAGE_COLUMNS if c in table.column_names and c not in candidates]
    for col in candidates:
        kind = table.schema.field(col).type
        if pa.types.is_struct(kind) and kind.get_field_index("bytes") >= 0:
            return col
    raise DataSourceError(
        f"{name}: no image column (an Image feature named one of {list(IMAGE_COLUMNS)}); "
        f"columns are {table.column_names}"
    )


def _class_labels(
    table: pa.Table, features: Features, col: str, name: str
) -> tuple[torch.Tensor, tuple[str, ...]]:
    from datasets import ClassLabel

    feature = features.get(col)
    if not isinstance(feature, ClassLabel) or not feature.names:
        raise DataSourceError(
            f"{name}: column {col!r} has no class names (feature {feature!r}); it must be a "
            "ClassLabel(names=[...]) feature, as written by datasets"
        )
    return _int_column(table, col, name), tuple(feature.names)


def _int_column(table: pa.Table, col: str, name: str) -> torch.Tensor:
    column = table.column(col)
    if column.null_count or not pa.types.is_integer(column.type):
        raise DataSourceError(
            f"{name}: column {col!r} must hold integers without gaps, found type "
            f"{column.type} with {column.null_count} missing values"
        )
    return torch.from_numpy(column.to_numpy().astype(np.int64, copy=False).copy())


def _decode_images(column: pa.ChunkedArray, name: str) -> torch.Tensor:
    """Decode a column of encoded images (datasets' Image struct) into uint8 (N, 3, H, W).

    PIL decodes each image straight into one preallocated array (no per-pixel Python); one
    transpose at the end gives the channels-first layout.
    """
    blobs = pc.struct_field(column.combine_chunks(), "bytes")
    if blobs.null_count:
        row = pc.index(pc.is_null(blobs), True).as_py()
        raise DataSourceError(
            f"{name}: image at row {row} has no embedded bytes; certbench needs the image "
            "bytes inside the parquet file (datasets' Image feature embeds them)"
        )
    encoded = blobs.to_pylist()
    first = _decode_one(encoded[0], 0, name)
    out = np.empty((len(encoded), *first.shape), dtype=np.uint8)
    out[0] = first
    for row in range(1, len(encoded)):
        pixels = _decode_one(encoded[row], row, name)
        if pixels.shape != first.shape:
            raise DataSourceError(
                f"{name}: image at row {row} is {pixels.shape[1]}x{pixels.shape[0]} but the "
                f"first is {first.shape[1]}x{first.shape[0]}; all images of a set must share "
                "one size"
            )
        out[row] = pixels
    return torch.from_numpy(np.ascontiguousarray(out.transpose(0, 3, 1, 2)))


def _decode_one(blob: bytes, row: int, name: str) -> np.ndarray:
    """One image as uint8 (H, W, 3); anything but 8-bit RGB is refused, never converted."""
    try:
        with PILImage.open(io.BytesIO(blob), formats=IMAGE_FORMATS) as opened:
            image: PILImage.Image = opened
            if image.mode == "P" and image.palette is not None and image.palette.mode == "RGB":
                image = image.convert("RGB")  # lossless: a palette of RGB colours
            if image.mode != "RGB":
                raise DataSourceError(
                    f"{name}: image at row {row} has mode {image.mode} "
                    f"({len(image.getbands())} channel(s)); images must be 3-channel 8-bit RGB, "
                    "i.e. (3, H, W) uint8"
                )
            return np.asarray(image)
    except (OSError, SyntaxError, ValueError) as err:
        raise DataSourceError(f"{name}: cannot decode the image at row {row}: {err}") from err
