"""The manifest model bounds what it admits: finite numbers, strings that fit their database
columns without control characters, an input size a worker can afford. The CLI and the REST
intake share this model, so each limit is named in the error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from certbench.errors import ManifestError, PreprocessingError
from certbench.nets.loading import MAX_INPUT_SIDE, NAME_LENGTH, load_manifest


def manifest_dict(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "benchmark": "cifar10",
        "architecture": {"name": "cifar_resnet20", "kwargs": {}},
        "num_classes": 10,
        "preprocessing": {"mean": [0.49, 0.48, 0.45], "std": [0.2, 0.2, 0.2]},
        "smoothing": {"sigma": 0.25},
        "metadata": {"name": "model", "authors": ["A. Author"]},
    }
    doc.update(overrides)
    return doc


def _text(doc: dict[str, Any]) -> str:
    """JSON as Python writes it, with NaN/Infinity literals where the values are not finite."""
    return json.dumps(doc, allow_nan=True)


@pytest.mark.parametrize(
    ("overrides", "phrase"),
    [
        ({"preprocessing": {"mean": [0.5, float("nan"), 0.5], "std": [0.2] * 3}},
         "preprocessing.mean.1: Input should be a finite number"),
        ({"preprocessing": {"mean": [0.5] * 3, "std": [0.2, float("inf"), 0.2]}},
         "preprocessing.std.1: Input should be a finite number"),
        ({"smoothing": {"sigma": float("inf")}}, "smoothing.sigma: Input should be a finite"),
        ({"metadata": {"name": "x" * (NAME_LENGTH + 1)}},
         f"metadata.name: String should have at most {NAME_LENGTH} characters"),
        ({"metadata": {"name": "a\x00b"}}, "metadata.name: Value error, must not contain control "
         "characters; found U+0000 at position 1"),
        ({"metadata": {"name": "ok", "authors": ["tab\there"]}}, "metadata.authors.0"),
        ({"benchmark": "cifar10\x00"}, "benchmark: Value error, must not contain control"),
        ({"architecture": {"name": "wrn", "kwargs": {"dropout": float("nan")}}},
         "architecture.kwargs.dropout"),
        ({"input_size": [3, 4096, 4096]},
         f"input_size.1: Input should be less than or equal to {MAX_INPUT_SIDE}"),
        ({"input_size": [3, 100000, 100000]}, "input_size.1"),
        ({"input_size": [300, 32, 32]}, "input_size.0: Input should be less than or equal to 4"),
        ({"num_classes": 10**30}, "num_classes: Input should be less than or equal to 100000"),
    ],
    ids=["nan-mean", "inf-std", "inf-sigma", "long-name", "nul-name", "tab-author",
         "nul-benchmark", "nan-kwarg", "input-4096", "input-1e5", "channels", "classes"],
)  # fmt: skip
def test_out_of_bounds_values_are_named(overrides: dict[str, Any], phrase: str) -> None:
    for source in (manifest_dict(**overrides), _text(manifest_dict(**overrides))):
        with pytest.raises(ManifestError, match="invalid manifest") as info:
            load_manifest(source)
        assert phrase in str(info.value)


def test_limits_themselves_are_accepted() -> None:
    manifest = load_manifest(
        manifest_dict(
            metadata={"name": "é" * NAME_LENGTH, "authors": ["Ada Lovelace"]},
            input_size=[3, MAX_INPUT_SIDE, MAX_INPUT_SIDE],
        )
    )
    assert len(manifest.metadata.name) == NAME_LENGTH
    assert manifest.input_size == (3, MAX_INPUT_SIDE, MAX_INPUT_SIDE)


def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    text = json.dumps(manifest_dict())
    path = tmp_path / "manifest.json"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    parsed = [load_manifest(src) for src in (b"\xef\xbb\xbf" + text.encode(), "\ufeff" + text,
                                             path, str(path))]  # fmt: skip
    assert all(m == load_manifest(text) for m in parsed)


@pytest.mark.parametrize(
    ("preprocessing", "phrase"),
    [
        ({"mean": [0.5] * 3, "std": [1e-300] * 3}, r"std\[0\] = 1e-300 is below float32's"),
        ({"mean": [0.5] * 3, "std": [0.2, 1e-39, 0.2]}, r"std\[1\] = 1e-39 is below float32's"),
        ({"mean": [0.5, -1e39, 0.5], "std": [0.2] * 3}, r"mean\[1\] = -1e\+39 is beyond"),
    ],
)
def test_preprocessing_float32_cannot_normalise_with_is_its_own_error(preprocessing, phrase):
    """Issue 35 §4: a std of 1e-300 was accepted; float32 holds it as 0 (every input ±inf)."""
    with pytest.raises(PreprocessingError, match=phrase):
        load_manifest(manifest_dict(preprocessing=preprocessing))
    assert load_manifest(manifest_dict(preprocessing={"mean": [0.5] * 3, "std": [1e-37] * 3}))
