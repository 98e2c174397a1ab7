"""Safe loading of submitted models: a JSON manifest, a registry architecture, safetensors weights.

User uploads are data, never code. Weights are read with ``safetensors`` only (never ``torch.load``,
pickle or TorchScript), the network is built from the registry by name with allow-listed kwargs,
loaded with ``strict=True`` and then exercised by a dummy forward pass, so every mistake a submitter
can make surfaces here as a :class:`~certbench.errors.ModelLoadError` subclass naming the fix.
"""

from __future__ import annotations

import json
import os
import tempfile
import unicodedata
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

import torch
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    HttpUrl,
    StrictFloat,
    StrictInt,
    StringConstraints,
    ValidationError,
    model_validator,
)
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import load_file, save_file
from torch import nn

from certbench.architectures import build_classifier, check_kwargs, create_architecture
from certbench.errors import (
    InputSizeError,
    ManifestError,
    ModelOutputError,
    NonFiniteOutputError,
    StateDictMismatchError,
    WeightsFormatError,
)
from certbench.safetensors_header import read_header

__all__ = [
    "MAX_CHANNELS",
    "MAX_INPUT_SIDE",
    "Architecture",
    "Manifest",
    "Metadata",
    "Preprocessing",
    "Smoothing",
    "check_model",
    "expected_tensor_count",
    "load_manifest",
    "load_model",
    "max_tensors",
    "read_safetensors",
    "save_weights",
]

# Prefix of the network inside ``nn.Sequential(NormalizeLayer, net)``.
NET_PREFIX = "1."


#: Input bounds every manifest obeys (a benchmark narrows them to its own image shape): the dummy
#: forward pass of validation allocates batch × C × H × W floats, so an unbounded input_size is a
#: memory bomb for the worker that runs it.
MAX_CHANNELS = 4
MAX_INPUT_SIDE = 1024
#: Lengths of the manifest strings that are stored in bounded database columns.
NAME_LENGTH = 128
KEY_LENGTH = 64


def _printable(value: str) -> str:
    """Refuse control characters (NUL, newlines, ...) and lone surrogates: they cannot be stored
    in PostgreSQL text, and have no business in a name shown on the leaderboard."""
    for position, char in enumerate(value):
        if unicodedata.category(char) in ("Cc", "Cs"):
            raise ValueError(
                f"must not contain control characters; found U+{ord(char):04X} at position "
                f"{position}"
            )
    return value


#: The same rule for JSON Schema readers (OpenAPI clients, property-based testers).
PRINTABLE_PATTERN = r"^[^\u0000-\u001f\u007f-\u009f]*$"
_SCHEMA = Field(json_schema_extra={"pattern": PRINTABLE_PATTERN})
#: Non-empty printable strings within their database columns (names, keys; display names).
Key = Annotated[
    str,
    StringConstraints(min_length=1, max_length=KEY_LENGTH),
    AfterValidator(_printable),
    _SCHEMA,
]
Name = Annotated[
    str,
    StringConstraints(min_length=1, max_length=NAME_LENGTH),
    AfterValidator(_printable),
    _SCHEMA,
]


#: JSON numbers only: NaN and ±Infinity (accepted by Python's JSON reader, refused by
#: PostgreSQL's JSON type and meaningless as a normalisation constant or a noise level).
Finite = Annotated[float, Field(allow_inf_nan=False)]
FiniteStrictFloat = Annotated[StrictFloat, Field(allow_inf_nan=False)]
Side = Annotated[int, Field(ge=1, le=MAX_INPUT_SIDE)]
Channels = Annotated[int, Field(ge=1, le=MAX_CHANNELS)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Architecture(_Strict):
    """Registry name plus kwargs; the kwargs are checked against the entry's allow-list on load."""

    name: Key
    kwargs: dict[Key, StrictInt | FiniteStrictFloat] = Field(default_factory=dict, max_length=16)


class Preprocessing(_Strict):
    """Per-channel mean/std of the NormalizeLayer placed in front of the network."""

    mean: tuple[Finite, ...] = Field(min_length=1, max_length=MAX_CHANNELS)
    std: tuple[Finite, ...] = Field(min_length=1, max_length=MAX_CHANNELS)

    @model_validator(mode="after")
    def _positive_std(self) -> Preprocessing:
        if any(s <= 0 for s in self.std):
            raise ValueError(f"std values must be > 0, got {list(self.std)}")
        return self


class Smoothing(_Strict):
    """Noise level the model was trained for; certification runs at this sigma."""

    sigma: Finite = Field(gt=0)


class Metadata(_Strict):
    """Who made the model and where to read about it (shown on the leaderboard)."""

    name: Name
    authors: list[Name] = Field(default_factory=list, max_length=100)
    paper_url: HttpUrl | None = None
    code_url: HttpUrl | None = None
    licence: Key | None = None


class Manifest(_Strict):
    """The JSON document accompanying a weights file (DESIGN.md §6).

    Every field is bounded so that whatever validates can be stored (PostgreSQL and SQLite) and
    run: finite numbers, strings within their database columns and free of control characters,
    ``input_size`` within (MAX_CHANNELS, MAX_INPUT_SIDE, MAX_INPUT_SIDE).
    """

    benchmark: Key
    architecture: Architecture
    num_classes: int = Field(ge=2, le=100_000)
    preprocessing: Preprocessing
    smoothing: Smoothing
    metadata: Metadata
    input_size: tuple[Channels, Side, Side] = (3, 32, 32)

    @model_validator(mode="after")
    def _channels_match(self) -> Manifest:
        channels = self.input_size[0]
        for field_name in ("mean", "std"):
            values = getattr(self.preprocessing, field_name)
            if len(values) != channels:
                raise ValueError(
                    f"preprocessing.{field_name} has {len(values)} values but input_size has "
                    f"{channels} channels; give one value per channel"
                )
        return self

    def canonical_json(self) -> str:
        """Sorted-key compact JSON: equal manifests give equal strings (for dedup hashing)."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def load_manifest(src: Path | str | bytes | Mapping[str, Any]) -> Manifest:
    """Parse and validate a manifest from a file path, JSON text/bytes or a mapping.

    Also checks the architecture name and kwargs against the registry, so a bad submission is
    refused before its weights are read. Raises ManifestError (or UnknownArchitectureError).
    """
    try:
        if isinstance(src, Mapping):
            manifest = Manifest.model_validate(dict(src))
        else:
            manifest = Manifest.model_validate_json(_manifest_text(src))
    except ValidationError as err:
        raise ManifestError(f"invalid manifest: {_describe(err)}") from err
    check_kwargs(manifest.architecture.name, manifest.architecture.kwargs)
    return manifest


UTF8_BOM = b"\xef\xbb\xbf"


def _manifest_text(src: Path | str | bytes) -> str | bytes:
    """JSON text of ``src``: a Path is read; a str is JSON if it looks like it, else a path.

    A leading UTF-8 byte-order mark (as some Windows editors write) is dropped: JSON forbids it,
    but it carries no meaning.
    """
    if isinstance(src, bytes):
        return src.removeprefix(UTF8_BOM)
    if isinstance(src, str) and src.lstrip("\ufeff \t\r\n").startswith("{"):
        return src.lstrip("\ufeff")
    path = Path(src)
    try:
        return path.read_bytes().removeprefix(UTF8_BOM)
    except OSError as err:
        raise ManifestError(f"cannot read manifest file {str(path)!r}: {err.strerror}") from err


def _describe(err: ValidationError) -> str:
    """pydantic's per-field messages on one line: 'smoothing.sigma: Input should be ...'."""
    parts = []
    for item in err.errors(include_url=False):
        where = ".".join(str(p) for p in item["loc"]) or "manifest"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def read_safetensors(
    src: Path | str | bytes, *, max_bytes: int | None = None, max_tensors: int | None = None
) -> dict[str, torch.Tensor]:
    """Read a safetensors file or buffer into CPU tensors, refusing anything else.

    The header is read and checked first (``certbench.safetensors_header.read_header``, bounded
    by ``max_tensors`` before it is parsed); only then does ``safetensors`` load the data.
    Floating tensors only, except integer BatchNorm ``num_batches_tracked`` counters, so a weight
    is never silently cast from ints. Raises WeightsFormatError.
    """
    size = len(src) if isinstance(src, bytes) else _file_size(Path(src))
    if max_bytes is not None and size > max_bytes:
        raise WeightsFormatError(
            f"weights are {size} bytes, above the limit of {max_bytes} bytes; "
            "submit a smaller model or store it in fp16/bf16"
        )
    read_header(src, max_tensors=max_tensors)
    try:
        if isinstance(src, bytes):
            tensors = load_safetensors_bytes(src)
        else:
            tensors = load_file(str(src), device="cpu")
    except (SafetensorError, ValueError, OSError) as err:
        raise WeightsFormatError(
            f"weights are not a valid safetensors file ({err}); save them with "
            "certbench.loading.save_weights or safetensors.torch.save_file"
        ) from err
    _check_dtypes(tensors)
    return tensors


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError as err:
        raise WeightsFormatError(f"cannot read weights file {str(path)!r}: {err.strerror}") from err


#: Slack of :func:`max_tensors`: a file for another architecture (ResNet-56 weights declared as a
#: ResNet-20) still gets the key-by-key mismatch report, while a header listing a million tensors
#: is refused before it is parsed.
TENSOR_FACTOR = 4
TENSOR_SLACK = 64


def expected_tensor_count(manifest: Manifest) -> int:
    """Tensors in the state dict of the manifest's architecture (BatchNorm counters included)."""
    arch = manifest.architecture
    kwargs = tuple(sorted(check_kwargs(arch.name, arch.kwargs).items()))
    return _tensor_count(arch.name, manifest.num_classes, kwargs)


def max_tensors(manifest: Manifest) -> int:
    """The most tensors a weights file for ``manifest`` may list (bounds its header too)."""
    return TENSOR_FACTOR * expected_tensor_count(manifest) + TENSOR_SLACK


@lru_cache(maxsize=64)
def _tensor_count(name: str, num_classes: int, kwargs: tuple[tuple[str, Any], ...]) -> int:
    # Built on the CPU once per process: 0.1 s for a ResNet-110, about 1 s for a WRN-28-10. The
    # meta device would skip the memory but its first initialiser call imports torch._refs,
    # which costs several seconds per process.
    net = create_architecture(name, num_classes=num_classes, **dict(kwargs))
    return len(net.state_dict())


def _check_dtypes(tensors: Mapping[str, torch.Tensor]) -> None:
    for key, tensor in tensors.items():
        counter = key.endswith("num_batches_tracked") and not tensor.is_floating_point()
        if not tensor.is_floating_point() and not counter:
            raise WeightsFormatError(
                f"tensor {key!r} has dtype {tensor.dtype}; weights must be floating point"
            )


def load_model(
    weights: Path | str | bytes,
    manifest: Manifest,
    *,
    device: torch.device | str | None = None,
    max_bytes: int | None = None,
) -> nn.Module:
    """Build the manifest's classifier, load ``weights`` strictly, check it, return it in eval mode.

    Keys may carry the ``1.`` prefix of ``nn.Sequential(NormalizeLayer, net)`` (Cohen et al.'s
    checkpoints, :func:`save_weights`) or be the bare network's keys (``conv1.weight``); a file must
    use one layout throughout. Raises the ModelLoadError subclasses of its steps.
    """
    tensors = read_safetensors(weights, max_bytes=max_bytes, max_tensors=max_tensors(manifest))
    arch = manifest.architecture
    model = build_classifier(
        arch.name,
        num_classes=manifest.num_classes,
        mean=manifest.preprocessing.mean,
        std=manifest.preprocessing.std,
        **arch.kwargs,
    )
    state = _with_prefix(tensors)
    _check_state_dict(model, state, arch.name)
    model.load_state_dict(state, strict=True)
    model.to(device or "cpu").eval()
    check_model(model, manifest, device=device)
    return model


def _with_prefix(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Add the ``1.`` prefix to bare network keys; a mixed file is left for the key check."""
    if any(key.startswith(NET_PREFIX) for key in tensors):
        return tensors
    return {NET_PREFIX + key: value for key, value in tensors.items()}


def _check_state_dict(model: nn.Module, state: Mapping[str, torch.Tensor], arch: str) -> None:
    """Compare keys and shapes first, so the error lists every problem at once."""
    expected = model.state_dict()
    # BatchNorm fills in absent counters itself (checkpoints from older PyTorch lack them).
    missing = sorted(k for k in set(expected) - set(state) if not k.endswith("num_batches_tracked"))
    unexpected = sorted(set(state) - set(expected))
    shapes = sorted(
        f"{k}: weights {tuple(state[k].shape)} vs model {tuple(expected[k].shape)}"
        for k in set(state) & set(expected)
        if state[k].shape != expected[k].shape
    )
    problems = []
    if missing:
        problems.append(f"missing keys ({len(missing)}): {_few(missing)}")
    if unexpected:
        problems.append(f"unexpected keys ({len(unexpected)}): {_few(unexpected)}")
    if shapes:
        problems.append(f"shape mismatches ({len(shapes)}): {_few(shapes)}")
    if problems:
        raise StateDictMismatchError(
            f"weights do not fit architecture {arch!r}: "
            + "; ".join(problems)
            + ". Check the manifest's architecture, kwargs and num_classes."
        )


def _few(items: list[str], limit: int = 8) -> str:
    more = f", ... (+{len(items) - limit} more)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


@torch.no_grad()
def check_model(
    model: nn.Module,
    manifest: Manifest,
    *,
    device: torch.device | str | None = None,
    batch: int = 2,
) -> None:
    """Dummy forward of ``batch`` inputs in [0,1] of ``manifest.input_size``; leaves eval mode.

    Raises InputSizeError if the model cannot take that size, ModelOutputError if the output is
    not (batch, num_classes) or not finite.
    """
    model.eval()
    generator = torch.Generator().manual_seed(0)
    x = torch.rand((batch, *manifest.input_size), generator=generator).to(device or "cpu")
    try:
        out = model(x)
    except (RuntimeError, ValueError) as err:
        raise InputSizeError(
            f"model fails on inputs of input_size {tuple(manifest.input_size)}: {err}. "
            "Set the manifest's input_size to what the architecture accepts"
        ) from err
    expected = (batch, manifest.num_classes)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != expected:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ModelOutputError(
            f"model output has shape {got}, expected {expected} (batch, num_classes); "
            "check the manifest's num_classes"
        )
    if not torch.isfinite(out).all():
        raise NonFiniteOutputError(
            "model outputs are not finite (NaN or inf) on inputs in [0,1]; check the weights"
        )


def save_weights(model: nn.Module, path: Path | str) -> None:
    """Write ``model.state_dict()`` as safetensors (atomic), the inverse of :func:`load_model`."""
    path = Path(path)
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        save_file(tensors, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
