"""Cheap checks on an upload, done before anything is stored.

Size caps (while the body streams, ``api.services.upload_stream``), manifest schema + registry
architecture (``certbench.nets.loading.load_manifest``), the benchmark, its class count, allowed σ
and image shape, its caps on the network's parameters and FLOPs per sample
(``models.benchmarks.limits.check_cost``, on the ``meta`` device), whether its data is on this
machine (``models.benchmarks.availability``: a run that could only fail for want of data is
refused here, with the command that fixes it), and the safetensors header of the staged weights file
(``certbench.nets.header.read_header``: bounded by the architecture's tensor count before
it is parsed; refuses pickles, truncated files, empty files, non-float tensors) and whether its
tensor names and shapes are the architecture's (``certbench.nets.check_fit``, counted on the
``meta`` device: no parameter is allocated, however large the declared network), all without
loading the tensors.
Loading the model and a dummy forward pass are the worker's ``validate`` task.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session

from api.services.upload_stream import FILES_SWAPPED_CODE, ReceivedUpload
from certbench.denoising import composition_label
from certbench.errors import (
    DuplicateTensorError,
    ManifestError,
    PreprocessingError,
    StateDictMismatchError,
    TruncatedWeightsError,
    UnknownArchitectureError,
    WeightsFormatError,
    WeightsHeaderTooLargeError,
)
from certbench.nets import (
    FILES_SWAPPED,
    FLOAT_DTYPES,
    Manifest,
    check_fit,
    load_manifest,
    looks_like_json,
    looks_like_safetensors,
    max_tensors,
    read_header,
)
from models.benchmarks.availability import benchmark_availability
from models.benchmarks.limits import check_cost
from models.catalog.benchmarks import get_benchmark
from models.core.errors import IntakeError, NotFoundError
from models.core.settings import Settings
from models.db.entities import Benchmark
from models.db.states import Reason
from models.submissions.intake import Upload

SIGMA_TOLERANCE = 1e-9
#: Image shape (C, H, W) of each base dataset the benchmarks certify on: a model is fed exactly
#: these images, so its manifest's input_size must match (validation's dummy forward pass runs at
#: input_size, and an oversized one only costs the worker memory).
IMAGE_SHAPES: dict[str, tuple[int, int, int]] = {
    "cifar10": (3, 32, 32),
    "cifar100": (3, 32, 32),
    "digits": (3, 32, 32),
}


def parse_manifest(data: bytes) -> Manifest:
    """Validated manifest. Raises IntakeError with code bad_manifest / unknown_architecture /
    bad_preprocessing (a mean or std float32 cannot normalise with)."""
    if not data.strip():
        raise IntakeError(
            "the manifest part is empty; send the JSON manifest (DESIGN.md §6)",
            code=Reason.BAD_MANIFEST.value,
        )
    if looks_like_safetensors(data[:16]):
        raise IntakeError(FILES_SWAPPED, code=FILES_SWAPPED_CODE)
    try:
        return load_manifest(data)
    except UnknownArchitectureError as err:
        raise IntakeError(str(err), code=Reason.UNKNOWN_ARCHITECTURE.value) from err
    except PreprocessingError as err:
        raise IntakeError(str(err), code=Reason.BAD_PREPROCESSING.value) from err
    except ManifestError as err:
        raise IntakeError(str(err), code=Reason.BAD_MANIFEST.value) from err


def check_against_benchmark(session: Session, manifest: Manifest) -> Benchmark:
    """The manifest's benchmark, if it exists and accepts this class count, σ and input size."""
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
    shape = IMAGE_SHAPES.get(benchmark.base_dataset)
    if shape is not None and tuple(manifest.input_size) != shape:
        raise IntakeError(
            f"manifest.input_size is {list(manifest.input_size)} but benchmark "
            f"{benchmark.name!r} certifies {benchmark.base_dataset} images of shape "
            f"{list(shape)} (C, H, W); set input_size to {list(shape)} or leave it out",
            code=Reason.INPUT_SIZE.value,
        )
    return benchmark


def check_data_available(benchmark: Benchmark, settings: Settings) -> None:
    """Refuse a submission to a benchmark whose data this machine does not hold (422
    dataset_unavailable naming the fix), unless ``require_local_data`` is off."""
    if not settings.require_local_data:
        return
    availability = benchmark_availability(benchmark, settings)
    if not availability.available:
        raise IntakeError(
            f"benchmark {benchmark.name!r}: data not available here: {availability.hint}",
            code=Reason.DATASET_UNAVAILABLE.value,
        )


def check_weights(src: Path | bytes, manifest: Manifest) -> None:
    """Check the safetensors header of the weights (file or bytes) without loading a tensor.

    Raises IntakeError: truncated_weights, weights_header_too_large (more tensors, or a larger
    header, than the manifest's architecture can have), duplicate_tensor_name (a key given twice
    in the header), not_safetensors, or state_dict_mismatch
    (no tensors at all, or tensor names/shapes that are not the architecture's: the worker would
    refuse them a moment later, with a far longer report).
    """
    size = len(src) if isinstance(src, bytes) else src.stat().st_size
    if size < 8:
        raise IntakeError(
            f"the weights part is {size} bytes, too short for any .safetensors file; send the "
            "whole file",
            code=Reason.TRUNCATED.value,
        )
    if looks_like_json(_head(src)):
        raise IntakeError(FILES_SWAPPED, code=FILES_SWAPPED_CODE)
    try:
        header = read_header(src, max_tensors=max_tensors(manifest))
    except TruncatedWeightsError as err:
        raise IntakeError(str(err), code=Reason.TRUNCATED.value) from err
    except WeightsHeaderTooLargeError as err:
        raise IntakeError(str(err), code=Reason.HEADER_TOO_LARGE.value) from err
    except DuplicateTensorError as err:
        raise IntakeError(str(err), code=Reason.DUPLICATE_TENSOR.value) from err
    except WeightsFormatError as err:
        raise IntakeError(str(err), code=Reason.NOT_SAFETENSORS.value) from err
    if not header.tensors:
        raise IntakeError(
            "the weights file holds no tensors (its safetensors header is empty); save the "
            "model's state dict: safetensors.torch.save_file(model.state_dict(), path)",
            code=Reason.STATE_DICT_MISMATCH.value,
        )
    for key, info in header.tensors.items():
        counter = key.endswith("num_batches_tracked") and info.dtype.startswith(("I", "U"))
        if info.dtype not in FLOAT_DTYPES and not counter:
            raise IntakeError(
                f"tensor {key!r} has dtype {info.dtype}; weights must be floating point",
                code=Reason.NOT_SAFETENSORS.value,
            )
    try:
        check_fit({key: info.shape for key, info in header.tensors.items()}, manifest)
    except StateDictMismatchError as err:
        raise IntakeError(str(err), code=Reason.STATE_DICT_MISMATCH.value) from err


def _head(src: Path | bytes, size: int = 64) -> bytes:
    """The first ``size`` bytes of the weights (enough to tell JSON from safetensors)."""
    if isinstance(src, bytes):
        return src[:size]
    with src.open("rb") as handle:
        return handle.read(size)


def build_upload(
    session: Session, received: ReceivedUpload, *, settings: Settings
) -> tuple[Benchmark, Upload]:
    """Run every cheap check on a received body, in the order a submitter would fix them;
    nothing is written. (The licence of published weights is checked with the submission's
    other columns, ``models.submissions.intake.with_publication_checked``.)"""
    if received.manifest is None:
        raise IntakeError(
            "the form part 'manifest' is missing; send the JSON manifest as a part named manifest",
            code="invalid_request",
        )
    if received.weights is None:
        raise IntakeError(
            "the form part 'weights' is missing; send the .safetensors file as a part named "
            "weights",
            code="invalid_request",
        )
    manifest = parse_manifest(received.manifest)
    benchmark = check_against_benchmark(session, manifest)
    cost = check_cost(benchmark, manifest)  # builds the network on meta: errors named here
    check_data_available(benchmark, settings)
    check_weights(received.weights.path, manifest)
    return benchmark, Upload(
        weights=b"",
        staged=received.weights,
        manifest=manifest.model_dump(mode="json"),
        model_name=manifest.metadata.name,
        architecture=composition_label(manifest.denoiser, manifest.architecture.name),
        sigma=manifest.smoothing.sigma,
        is_private=received.private,
        extra_data=received.extra_data,
        venue=received.venue or None,
        weights_public=received.weights_public,
        weights_license=received.weights_license,
        flops_per_sample=cost.flops_per_sample,
    )
