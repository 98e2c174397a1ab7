"""certbench.data.image_set: a Subset picks every skip-th image then the first limit; an ImageSet
refuses images, labels and metadata that do not form a valid set."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from certbench.data.image_set import ImageSet, Subset
from certbench.errors import DataSourceError


def test_subset_every_skip_th_then_first_limit() -> None:
    np.testing.assert_array_equal(Subset().positions(5), [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(Subset(skip=3).positions(10), [0, 3, 6, 9])
    np.testing.assert_array_equal(Subset(skip=3, limit=2).positions(10), [0, 3])
    assert len(Subset(skip=20).positions(10_000)) == 500  # the protocol's subset


@pytest.mark.parametrize("kwargs", [{"skip": 0}, {"skip": -2}, {"skip": 1.5}, {"limit": 0}])
def test_subset_rejects_bad_values(kwargs: dict) -> None:
    with pytest.raises(DataSourceError, match="Subset"):
        Subset(**kwargs)


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
