"""Read and check a safetensors header without loading a single tensor.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON (one entry per
tensor: ``dtype``, ``shape``, ``data_offsets`` into the byte buffer that follows, plus an optional
``__metadata__`` map of strings) and the buffer. :func:`read_header` reads only those N + 8 bytes,
refuses a header larger than the caller's bound *before* parsing it (a 72 MB header of a million
zero-size tensors costs seconds and gigabytes to parse), and checks what the ``safetensors``
library checks when it loads: known dtypes, sizes that match the shapes, offsets that tile the
buffer exactly to the end of the file. So an upload can be vetted from the file on disk, in
bounded memory, and the tensors are loaded later by ``safetensors`` itself.

Whether the bytes are some *other* format (a pickle, a ``torch.save`` zip) is decided only after
the safetensors parse failed, and only to word the error: the first byte of a valid file is the
low byte of its header length, so sniffing first would refuse about 1 in 256 valid files.
"""

from __future__ import annotations

import io
import json
import math
import pickletools
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeGuard

from certbench.errors import (
    DuplicateTensorError,
    TruncatedWeightsError,
    WeightsFormatError,
    WeightsHeaderTooLargeError,
)

__all__ = [
    "FILES_SWAPPED",
    "FLOAT_DTYPES",
    "HEADER_BYTES_BASE",
    "HEADER_BYTES_PER_TENSOR",
    "Header",
    "TensorInfo",
    "header_limit",
    "looks_like_json",
    "looks_like_safetensors",
    "read_header",
]

#: Bytes per element of every dtype name the format defines (``safetensors`` ``Dtype``).
DTYPE_SIZES: Mapping[str, int] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip
#: The floating dtypes a weight may have (torch ``is_floating_point``).
FLOAT_DTYPES = frozenset({"F8_E5M2", "F8_E4M3", "F16", "BF16", "F32", "F64"})
#: Header bound: room for ``__metadata__`` plus a generous JSON entry per expected tensor (a
#: cifar_resnet20 entry takes about 85 bytes).
HEADER_BYTES_BASE = 64 * 1024
HEADER_BYTES_PER_TENSOR = 512
#: Bytes sniffed for a pickle when the safetensors parse failed.
_SNIFF_BYTES = 256
_PICKLE_STARTS = frozenset({"PROTO", "MARK", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "GLOBAL"})


#: What a submitter who passed the manifest as weights and the weights as manifest is told.
FILES_SWAPPED = (
    "the files look swapped: pass the .safetensors file as --weights and the JSON manifest as "
    "--manifest (form parts 'weights' and 'manifest')"
)
#: A header length above this is not a plausible safetensors file; the first 8 bytes of any
#: JSON text read as a little-endian length are far above it (their top byte is printable).
_PLAUSIBLE_HEADER = 1 << 40


def looks_like_safetensors(head: bytes) -> bool:
    """Whether ``head`` (the first bytes of some data) starts like a safetensors file: a
    plausible 8-byte little-endian header length, then the header's opening brace."""
    if len(head) < 10 or head[8:9] != b"{":
        return False
    (length,) = struct.unpack("<Q", head[:8])
    return 2 <= length < _PLAUSIBLE_HEADER


def looks_like_json(head: bytes) -> bool:
    """Whether ``head`` starts like a JSON object (a manifest), not like a safetensors file
    (whose first byte, the low byte of its header length, may happen to be ``{``)."""
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n")
    return text.startswith(b"{") and not looks_like_safetensors(head)


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as the header describes it."""

    dtype: str
    shape: tuple[int, ...]
    start: int
    stop: int


@dataclass(frozen=True)
class Header:
    """A checked safetensors header: its tensors by name and the total file size it implies."""

    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]
    header_bytes: int
    file_bytes: int


def header_limit(max_tensors: int) -> int:
    """Largest header accepted for a file expected to hold at most ``max_tensors`` tensors."""
    return HEADER_BYTES_BASE + HEADER_BYTES_PER_TENSOR * max_tensors


def read_header(
    src: Path | str | bytes, *, max_tensors: int | None = None, max_header_bytes: int | None = None
) -> Header:
    """Read and check the header of a safetensors file or buffer (tensor data is not read).

    ``max_tensors`` bounds the number of tensors (e.g. the architecture's state dict size) and,
    through :func:`header_limit`, the header size unless ``max_header_bytes`` is given. Raises
    WeightsFormatError naming the problem (and the format, for pickles and zip archives).
    """
    if isinstance(src, bytes):
        return _read(io.BytesIO(src), len(src), max_tensors, max_header_bytes)
    path = Path(src)
    try:
        with path.open("rb") as handle:
            return _read(handle, path.stat().st_size, max_tensors, max_header_bytes)
    except OSError as err:
        raise WeightsFormatError(f"cannot read weights file {str(path)!r}: {err.strerror}") from err


def _read(
    handle: BinaryIO, size: int, max_tensors: int | None, max_header_bytes: int | None
) -> Header:
    head = handle.read(_SNIFF_BYTES)
    if len(head) < 8:
        raise WeightsFormatError(
            f"weights are only {len(head)} bytes: not a safetensors file (truncated or empty)"
        )
    if head[8:9] != b"{":  # every safetensors header is a JSON object
        raise WeightsFormatError(_describe_other_format(head))
    (length,) = struct.unpack("<Q", head[:8])
    limit = max_header_bytes
    if limit is None and max_tensors is not None:
        limit = header_limit(max_tensors)
    if limit is not None and length > limit:
        raise WeightsHeaderTooLargeError(
            f"the safetensors header is {length} bytes, above the limit of {limit} bytes for "
            f"this architecture (at most {max_tensors} tensors); save only the model's state "
            "dict: safetensors.torch.save_file(model.state_dict(), path)"
        )
    if length + 8 > size:
        raise TruncatedWeightsError(
            f"weights are not a valid safetensors file: the header is {length} bytes but the "
            f"file has only {size}; the upload was cut short"
        )
    handle.seek(8)
    return _parse(handle.read(length), size=size, max_tensors=max_tensors)


def _invalid(problem: str) -> WeightsFormatError:
    return WeightsFormatError(
        f"weights are not a valid safetensors file ({problem}); save them with "
        "certbench.nets.loading.save_weights or safetensors.torch.save_file"
    )


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's members, refusing a name given twice: ``json`` keeps the last of them
    silently, and a reader that keeps the first (or checks the tiling against both) would load
    other bytes under that name than this check saw."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            shown = key if len(key) <= 80 else key[:80] + "…"
            raise DuplicateTensorError(
                f"the safetensors header has the key {shown!r} twice; tensor names (and the "
                "fields of each entry) must be unique: save the model's state dict with "
                "safetensors.torch.save_file"
            )
        found[key] = value
    return found


def _parse(raw: bytes, *, size: int, max_tensors: int | None) -> Header:
    try:
        document = json.loads(raw, object_pairs_hook=_unique_keys)
    except (UnicodeDecodeError, ValueError) as err:
        raise _invalid(f"the header is not JSON: {err}") from err
    if not isinstance(document, dict):
        raise _invalid("the header is not a JSON object")
    metadata = document.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise _invalid("__metadata__ must map strings to strings")
    if max_tensors is not None and len(document) > max_tensors:
        raise WeightsHeaderTooLargeError(
            f"the weights list {len(document)} tensors, above the limit of {max_tensors} for "
            "this architecture; check the manifest's architecture and save only the model's "
            "state dict"
        )
    tensors = {name: _entry(name, value) for name, value in document.items()}
    end = _check_tiling(tensors)
    expected = 8 + len(raw) + end
    if expected > size:
        raise TruncatedWeightsError(
            f"weights are not a valid safetensors file: the header describes {expected} bytes "
            f"but the file has only {size}; the upload was cut short"
        )
    if expected < size:
        raise _invalid(f"{size - expected} bytes follow the last tensor")
    return Header(tensors, dict(metadata), len(raw), size)


def _entry(name: str, value: Any) -> TensorInfo:
    if not isinstance(value, dict):
        raise _invalid(f"entry {name!r} is not an object")
    dtype, shape, offsets = value.get("dtype"), value.get("shape"), value.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_SIZES:
        raise WeightsFormatError(
            f"tensor {name!r} has unknown dtype {dtype!r}; use one of {sorted(DTYPE_SIZES)}"
        )
    if not _ints(shape) or not _ints(offsets) or len(offsets) != 2:
        raise _invalid(f"entry {name!r} needs an integer shape and two data_offsets")
    start, stop = offsets
    nbytes = math.prod(shape) * DTYPE_SIZES[dtype]
    if not 0 <= start <= stop or stop - start != nbytes:
        raise _invalid(
            f"tensor {name!r} of shape {shape} and dtype {dtype} needs {nbytes} bytes but its "
            f"data_offsets are {offsets}"
        )
    return TensorInfo(dtype, tuple(shape), start, stop)


def _ints(value: Any) -> TypeGuard[list[int]]:
    return isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    )


def _check_tiling(tensors: Mapping[str, TensorInfo]) -> int:
    """The buffer must be covered exactly, tensor after tensor; returns its length."""
    position = 0
    for name, info in sorted(tensors.items(), key=lambda item: (item[1].start, item[1].stop)):
        if info.start != position:
            raise _invalid(
                f"tensor {name!r} starts at byte {info.start} of the data buffer, expected "
                f"{position} (overlap or gap)"
            )
        position = info.stop
    return position


def _describe_other_format(head: bytes) -> str:
    """The message for bytes that are not safetensors: name pickles and zip archives."""
    if head[:2] == b"PK":
        return (
            "weights look like a pickle / torch.save file (a zip archive, as torch.save and "
            "TorchScript write), never loaded since it can run code; convert it with "
            "safetensors.torch.save_file(model.state_dict(), 'model.safetensors')"
        )
    if _looks_like_pickle(head):
        return (
            "weights look like a pickle / torch.save file, never loaded since it can run code; "
            "convert it with safetensors.torch.save_file(model.state_dict(), 'model.safetensors')"
        )
    return str(_invalid("the header does not start with a JSON object"))


def _looks_like_pickle(head: bytes) -> bool:
    """Whether ``head`` starts like a pickle of any protocol (0-5), judged by decoding its first
    opcodes with ``pickletools.genops``, which parses and never executes."""
    count = 0
    try:
        for opcode, _arg, _pos in pickletools.genops(io.BytesIO(head)):
            if count == 0 and opcode.name not in _PICKLE_STARTS:
                return False
            count += 1
            if count >= 3:
                return True
    except ValueError:  # an unknown opcode or an argument cut off by the end of ``head``
        return count >= 2
    return count >= 2
