"""Cheap checks on an upload, done before anything is stored.

Size caps, manifest schema + registry architecture (``certbench.loading.load_manifest``), the
benchmark, its class count and allowed σ, and a safetensors parse of the weights
(``certbench.loading.read_safetensors``: refuses pickles, truncated files, non-float tensors).
Loading the model and a dummy forward pass are the worker's ``validate`` task.
"""

from __future__ import annotations

import json
import struct
from typing import BinaryIO

from sqlalchemy.orm import Session

from certbench.errors import ManifestError, UnknownArchitectureError, WeightsFormatError
from certbench.loading import Manifest, load_manifest, read_safetensors
from models.catalog import get_benchmark
from models.entities import Benchmark
from models.errors import IntakeError, NotFoundError, PayloadTooLargeError
from models.settings import Settings
from models.states import Reason
from models.submissions import Upload

SIGMA_TOLERANCE = 1e-9


def read_capped(stream: BinaryIO, *, limit: int, part: str) -> bytes:
    """Read a whole upload part, refusing (413) one longer than ``limit`` bytes."""
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise PayloadTooLargeError(
            f"{part} is larger than the limit of {limit} bytes; submit a smaller file "
            "(weights can be stored in fp16/bf16)",
            code=Reason.TOO_LARGE.value,
        )
    return data


def parse_manifest(data: bytes) -> Manifest:
    """Validated manifest. Raises IntakeError with code bad_manifest / unknown_architecture."""
    if not data.strip():
        raise IntakeError(
            "the manifest part is empty; send the JSON manifest (DESIGN.md §6)",
            code=Reason.BAD_MANIFEST.value,
        )
    try:
        return load_manifest(data)
    except UnknownArchitectureError as err:
        raise IntakeError(str(err), code=Reason.UNKNOWN_ARCHITECTURE.value) from err
    except ManifestError as err:
        raise IntakeError(str(err), code=Reason.BAD_MANIFEST.value) from err


def check_against_benchmark(session: Session, manifest: Manifest) -> Benchmark:
    """The manifest's benchmark, if it exists and accepts this class count and σ."""
    try:
        benchmark = get_benchmark(session, manifest.benchmark)
    except NotFoundError as err:
        raise IntakeError(
            f"manifest.benchmark: {err}", code=Reason.BENCHMARK_MISMATCH.value
        ) from err
    if manifest.num_classes != benchmark.num_classes:
        raise IntakeError(
            f"manifest.num_classes is {manifest.num_classes} but benchmark {benchmark.name!r} has "
            f"{benchmark.num_classes} classes",
            code=Reason.BENCHMARK_MISMATCH.value,
        )
    sigma = manifest.smoothing.sigma
    if not any(abs(sigma - allowed) <= SIGMA_TOLERANCE for allowed in benchmark.sigmas):
        raise IntakeError(
            f"manifest.smoothing.sigma={sigma} is not allowed on {benchmark.name!r}; "
            f"use one of {benchmark.sigmas}",
            code=Reason.SIGMA_NOT_ALLOWED.value,
        )
    return benchmark


def check_weights(data: bytes, *, settings: Settings) -> None:
    """Parse the weights as safetensors. Raises IntakeError (not_safetensors/truncated_weights)."""
    if not data:
        raise IntakeError(
            "the weights part is empty; send a .safetensors file", code=Reason.TRUNCATED.value
        )
    try:
        read_safetensors(data, max_bytes=settings.max_weights_bytes)
    except WeightsFormatError as err:
        raise IntakeError(str(err), code=_weights_reason(data)) from err


def _weights_reason(data: bytes) -> str:
    """truncated_weights when the safetensors header promises more bytes than were sent (the
    header itself cut short, or tensors whose data offsets run past the end)."""
    if data[:1] == b"\x80" or data[:2] == b"PK":
        return Reason.NOT_SAFETENSORS.value
    if len(data) < 8:
        return Reason.TRUNCATED.value
    (header_len,) = struct.unpack("<Q", data[:8])
    if data[8:9] != b"{":
        return Reason.NOT_SAFETENSORS.value
    if header_len + 8 > len(data):
        return Reason.TRUNCATED.value
    try:
        header = json.loads(data[8 : 8 + header_len])
        end = max(
            (int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"),
            default=0,
        )
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return Reason.NOT_SAFETENSORS.value
    return (
        Reason.TRUNCATED.value
        if 8 + header_len + end > len(data)
        else (Reason.NOT_SAFETENSORS.value)
    )


def build_upload(
    session: Session,
    *,
    weights: bytes,
    manifest_bytes: bytes,
    settings: Settings,
    is_private: bool,
    extra_data: bool,
    venue: str | None,
) -> tuple[Benchmark, Upload]:
    """Run every cheap check, in the order a submitter would fix them; nothing is written."""
    manifest = parse_manifest(manifest_bytes)
    benchmark = check_against_benchmark(session, manifest)
    check_weights(weights, settings=settings)
    return benchmark, Upload(
        weights=weights,
        manifest=manifest.model_dump(mode="json"),
        model_name=manifest.metadata.name,
        architecture=manifest.architecture.name,
        sigma=manifest.smoothing.sigma,
        is_private=is_private,
        extra_data=extra_data,
        venue=venue or None,
    )
