"""Safetensors headers are parsed before any format sniffing, and bounded before they are parsed.

A valid file whose header length starts with the bytes of a pickle (0x80) or a zip ("PK") loads;
pickles of every protocol are still named; a header listing far more tensors than the
architecture has is refused without being parsed.
"""

from __future__ import annotations

import json
import pickle
import struct

import pytest
import torch
from safetensors.torch import save

from certbench.errors import (
    DuplicateTensorError,
    TruncatedWeightsError,
    WeightsFormatError,
    WeightsHeaderTooLargeError,
)
from certbench.nets.architectures import build_classifier
from certbench.nets.header import header_limit, read_header
from certbench.nets.loading import load_manifest, load_model, max_tensors, read_safetensors
from tests.support.odd_weights import with_duplicate

MEAN, STD = [0.4914, 0.4822, 0.4465], [0.2023, 0.1994, 0.2010]


@pytest.fixture(scope="module")
def state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = build_classifier("cifar_resnet20", num_classes=10, mean=MEAN, std=STD)
    return {k: v.contiguous() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def manifest():
    return load_manifest(
        {
            "benchmark": "cifar10",
            "architecture": {"name": "cifar_resnet20", "kwargs": {}},
            "num_classes": 10,
            "preprocessing": {"mean": MEAN, "std": STD},
            "smoothing": {"sigma": 0.25},
            "metadata": {"name": "m"},
        }
    )


def _header_length(blob: bytes) -> int:
    return struct.unpack("<Q", blob[:8])[0]


def _with_first_bytes(state: dict[str, torch.Tensor], prefix: bytes) -> bytes:
    """A valid file whose header length starts with ``prefix`` (padding the metadata: the
    header grows by one byte per character, then is padded to a multiple of 8)."""
    base = _header_length(save(state, metadata={"note": ""}))
    value, modulus = int.from_bytes(prefix, "little"), 256 ** len(prefix)
    target = base + (value - base) % modulus
    for pad in range(max(0, target - base - 8), target - base + 9):
        blob = save(state, metadata={"note": "x" * pad})
        if blob.startswith(prefix):
            return blob
    raise AssertionError(f"no padding gives a header length starting with {prefix!r}")


@pytest.mark.parametrize("prefix", [b"\x80", b"PK"], ids=["pickle-byte", "zip-bytes"])
def test_valid_files_that_start_like_other_formats_load(state, manifest, prefix, tmp_path):
    blob = _with_first_bytes(state, prefix)
    assert blob[8:9] == b"{"
    loaded = read_safetensors(blob)
    assert set(loaded) == set(state)
    path = tmp_path / "m.safetensors"
    path.write_bytes(blob)
    assert set(read_header(path).tensors) == set(state)
    load_model(path, manifest)  # strict load and dummy forward


def test_the_issue_reproduction_loads(state, manifest):
    blob = save(state, metadata={"note": ""})
    assert _header_length(blob) == 0x2B80  # low byte 0x80, the first byte of a pickle protocol 2+
    assert len(load_model(blob, manifest).state_dict()) == len(state)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickles_of_every_protocol_are_named(state, protocol):
    blob = pickle.dumps({k: v.tolist() for k, v in list(state.items())[:3]}, protocol=protocol)
    with pytest.raises(WeightsFormatError, match=r"pickle / torch\.save.*never loaded"):
        read_safetensors(blob)


def test_a_header_of_many_empty_tensors_is_refused_before_parsing(state, manifest):
    bomb = {f"t{i}": torch.zeros(0) for i in range(20_000)}
    blob = save(bomb)
    limit = max_tensors(manifest)
    assert len(bomb) > limit and len(blob) - 8 > header_limit(limit)
    with pytest.raises(WeightsHeaderTooLargeError, match=r"header is \d+ bytes, above the limit"):
        load_model(blob, manifest)
    # A header within the byte limit but listing too many tensors names the count.
    few = save({f"t{i}": torch.zeros(0) for i in range(limit + 1)})
    with pytest.raises(WeightsHeaderTooLargeError, match=rf"list {limit + 1} tensors"):
        read_safetensors(few, max_tensors=limit)


def test_huge_metadata_is_refused(state):
    blob = save(state, metadata={"note": "x" * 2_000_000})
    with pytest.raises(WeightsHeaderTooLargeError, match="above the limit"):
        read_header(blob, max_tensors=len(state))


def test_header_checks_match_the_library(state):
    blob = save(state)
    header = read_header(blob)
    assert len(header.tensors) == len(state) and header.file_bytes == len(blob)
    with pytest.raises(TruncatedWeightsError, match="cut short"):
        read_header(blob[:-1])
    with pytest.raises(WeightsFormatError, match="bytes follow the last tensor"):
        read_header(blob + b"\0")
    length = _header_length(blob)
    document = json.loads(blob[8 : 8 + length])
    first = next(k for k in document if k != "__metadata__")
    document[first]["data_offsets"][1] += 4
    raw = json.dumps(document).encode()
    forged = struct.pack("<Q", len(raw)) + raw + blob[8 + length :]
    with pytest.raises(WeightsFormatError, match=r"needs \d+ bytes but its data_offsets"):
        read_header(forged)


@pytest.mark.parametrize("other_offsets", [False, True], ids=["same-bytes", "other-bytes"])
def test_a_name_given_twice_is_refused_not_collapsed(state, other_offsets: bool):
    """Python's JSON reader keeps the last of two equal keys: the header must refuse them
    (issue 35 §4), whatever offsets each copy names."""
    blob = with_duplicate(save(state), other_offsets=other_offsets)
    with pytest.raises(DuplicateTensorError, match=r"has the key '[^']+' twice"):
        read_header(blob)
    with pytest.raises(DuplicateTensorError):
        read_safetensors(blob)


def test_a_key_given_twice_inside_an_entry_or_the_metadata_is_refused_too():
    for header in (
        b'{"__metadata__": {"a": "b", "a": "c"}, "w": {"dtype": "F32", "shape": [1], '
        b'"data_offsets": [0, 4]}}',
        b'{"w": {"dtype": "F32", "dtype": "F16", "shape": [1], "data_offsets": [0, 4]}}',
    ):
        blob = struct.pack("<Q", len(header)) + header + b"\0" * 4
        with pytest.raises(DuplicateTensorError, match="twice"):
            read_header(blob)
