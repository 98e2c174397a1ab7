"""Receive a submission's multipart body as a stream: weights to disk while hashing, in bounded
memory, after the caller has authenticated and checked the quotas.

FastAPI's ``UploadFile`` parameters make the framework read (and spool to a temporary file) the
whole body before any dependency runs, so an anonymous client could push a full-size body before
its 401, and the intake then held it in memory. Here the route declares no body parameters; once
its dependencies pass and the intake has checked the quotas (``models.submissions.intake.submit``
calls back ``api.services.submissions``), :func:`receive_upload` feeds ``request.stream()`` to
``python_multipart`` and writes the ``weights`` part chunk by chunk to
``<artifacts>/incoming/<random>.tmp`` (same file system as the weights folder, so storing it is a
rename), computing its SHA-256 on the way. Every part is capped as it arrives; a repeated or
unknown part is refused.

It runs in the intake's worker thread: each chunk is awaited on the event loop as it arrives
(``anyio.from_thread``) and parsed and written in that thread, so the event loop never blocks on
the disk and the upload needs no second thread.
"""

from __future__ import annotations

import hashlib
import os
import unicodedata
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import anyio.from_thread
import python_multipart
from fastapi import Request
from pydantic import TypeAdapter, ValidationError
from python_multipart.multipart import parse_options_header

from certbench.nets import FILES_SWAPPED, looks_like_safetensors
from models.core.errors import IntakeError, PayloadTooLargeError
from models.core.settings import Settings
from models.db.states import Reason
from models.submissions.artifacts import INCOMING_DIR, PARTIAL_SUFFIX
from models.submissions.intake import StagedWeights

if TYPE_CHECKING:  # a TypedDict python_multipart defines for type checkers only
    from python_multipart.multipart import MultipartCallbacks

#: Code of the refusal of an upload whose weights and manifest parts were exchanged.
FILES_SWAPPED_CODE = "files_swapped"

#: Form fields besides the two files, and the cap on each (short flags, a venue, a licence).
FIELDS = ("private", "extra_data", "venue", "weights_public", "weights_license")
FIELD_BYTES = 1024
VENUE_LENGTH = 64
PARTS = ("weights", "manifest", *FIELDS)
_BOOL = TypeAdapter(bool)


@dataclass
class ReceivedUpload:
    """The parts of a submission body: staged weights, manifest bytes, the form fields."""

    weights: StagedWeights | None
    manifest: bytes | None
    private: bool = False
    extra_data: bool = False
    venue: str | None = None
    weights_public: bool = False
    weights_license: str | None = None

    def discard(self) -> None:
        """Remove the staged weights file (a no-op once it was moved into the store)."""
        if self.weights is not None:
            self.weights.discard()


@dataclass
class _Part:
    name: str = ""
    disposition: bytes = b""
    header_name: bytes = b""
    header_value: bytes = b""
    data: bytearray = field(default_factory=bytearray)


class _Receiver:
    """``python_multipart`` callbacks: route each part's bytes to the file or a capped buffer."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.seen: set[str] = set()
        self.part = _Part()
        self.values: dict[str, bytes] = {}
        self.file: BinaryIO | None = None
        self.path: Path | None = None
        self.sha = hashlib.sha256()
        self.size = 0

    # -- headers ---------------------------------------------------------------------------------

    def on_part_begin(self) -> None:
        self.part = _Part()

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self.part.header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self.part.header_value += data[start:end]

    def on_header_end(self) -> None:
        if self.part.header_name.strip().lower() == b"content-disposition":
            self.part.disposition = self.part.header_value
        self.part.header_name, self.part.header_value = b"", b""

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self.part.disposition)
        name = options.get(b"name", b"").decode("utf-8", errors="replace")
        if name not in PARTS:
            raise _invalid(
                f"unknown form part {name[:40]!r}; send the parts weights and manifest, and "
                f"optionally {', '.join(FIELDS)}"
            )
        if name in self.seen:
            raise _invalid(f"the form part {name!r} was sent twice; send it once")
        self.seen.add(name)
        self.part.name = name
        if name == "weights":
            self._open_staging()

    # -- data ------------------------------------------------------------------------------------

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        chunk = data[start:end]
        if self.part.name == "weights":
            self.size += len(chunk)
            if self.size > self.settings.max_weights_bytes:
                raise PayloadTooLargeError(
                    f"weights is larger than the limit of {self.settings.max_weights_bytes} bytes; "
                    "submit a smaller file (weights can be stored in fp16/bf16)",
                    code=Reason.TOO_LARGE.value,
                )
            self.sha.update(chunk)
            assert self.file is not None  # opened when the part's headers finished
            self.file.write(chunk)
            return
        limit = self.settings.max_manifest_bytes if self.part.name == "manifest" else FIELD_BYTES
        if len(self.part.data) + len(chunk) > limit:
            if self.part.name == "manifest" and looks_like_safetensors(
                bytes(self.part.data[:16]) + chunk[:16]
            ):  # a weights file sent as the manifest: say so, not "too large"
                raise IntakeError(FILES_SWAPPED, code=FILES_SWAPPED_CODE)
            raise PayloadTooLargeError(
                f"{self.part.name} is larger than the limit of {limit} bytes",
                code=Reason.TOO_LARGE.value,
            )
        self.part.data += chunk

    def on_part_end(self) -> None:
        if self.part.name == "weights":
            assert self.file is not None
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            self.file = None
        else:
            self.values[self.part.name] = bytes(self.part.data)

    # -- staging file ------------------------------------------------------------------------------

    def _open_staging(self) -> None:
        folder = self.settings.artifacts_dir / INCOMING_DIR
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f".upload-{uuid.uuid4().hex}{PARTIAL_SUFFIX}"
        self.file = self.path.open("xb")

    def close(self) -> None:
        """Close the staging file after an error (the caller removes it)."""
        if self.file is not None:
            self.file.close()
            self.file = None

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self.on_part_begin,
            "on_part_data": self.on_part_data,
            "on_part_end": self.on_part_end,
            "on_header_field": self.on_header_field,
            "on_header_value": self.on_header_value,
            "on_header_end": self.on_header_end,
            "on_headers_finished": self.on_headers_finished,
        }


def receive_upload(request: Request, *, settings: Settings) -> ReceivedUpload:
    """Read the body of ``POST /api/v1/submissions``, from a worker thread of the request's event
    loop (``anyio.to_thread``). Raises IntakeError (422) for a body that is not multipart or has
    unknown, repeated or malformed parts, PayloadTooLargeError (413) as soon as a part exceeds
    its cap. Nothing is left on disk when it raises."""
    content_type = request.headers.get("content-type", "")
    kind, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise _invalid(
            f"the body must be multipart/form-data with the parts weights and manifest, got "
            f"Content-Type {content_type[:80]!r}"
        )
    receiver = _Receiver(settings)
    try:
        parser = python_multipart.MultipartParser(boundary, receiver.callbacks())
        for chunk in _chunks(request):
            _feed(parser, chunk)
        parser.finalize()
        if receiver.file is not None:
            raise _invalid("the body ended inside the weights part; send the whole file")
        staged = (
            StagedWeights(receiver.path, receiver.sha.hexdigest(), receiver.size)
            if receiver.path is not None
            else None
        )
        return ReceivedUpload(
            weights=staged,
            manifest=receiver.values.get("manifest"),
            private=_flag(receiver.values, "private"),
            extra_data=_flag(receiver.values, "extra_data"),
            venue=_venue(receiver.values),
            weights_public=_flag(receiver.values, "weights_public"),
            weights_license=_text(receiver.values, "weights_license"),
        )
    except BaseException:
        receiver.close()
        if receiver.path is not None:
            receiver.path.unlink(missing_ok=True)
        raise


def _chunks(request: Request) -> Iterator[bytes]:
    """The body's non-empty chunks, each awaited on the event loop as it arrives."""
    stream = request.stream()

    async def next_chunk() -> bytes | None:
        return await anext(stream, None)

    while (chunk := anyio.from_thread.run(next_chunk)) is not None:
        if chunk:
            yield chunk


def _feed(parser: python_multipart.MultipartParser, chunk: bytes) -> None:
    try:
        parser.write(chunk)
    except python_multipart.exceptions.MultipartParseError as err:
        raise _invalid(f"the multipart body is malformed ({err})") from err


def _flag(values: dict[str, bytes], name: str) -> bool:
    raw = values.get(name)
    if raw is None:
        return False
    try:
        return _BOOL.validate_python(raw.decode("utf-8", errors="replace").strip())
    except ValidationError as err:
        raise _invalid(f"{name} must be true or false, got {raw[:20]!r}") from err


def _venue(values: dict[str, bytes]) -> str | None:
    raw = values.get("venue")
    if raw is None:
        return None
    try:
        venue = raw.decode("utf-8").strip()
    except UnicodeDecodeError as err:
        raise _invalid("venue must be UTF-8 text") from err
    if len(venue) > VENUE_LENGTH or any(unicodedata.category(c) == "Cc" for c in venue):
        raise _invalid(
            f"venue must be at most {VENUE_LENGTH} characters without control characters"
        )
    return venue or None


def _text(values: dict[str, bytes], name: str) -> str | None:
    """A short text field as sent (None when absent or blank); checked by the caller."""
    raw = values.get(name)
    if raw is None:
        return None
    try:
        return raw.decode("utf-8").strip() or None
    except UnicodeDecodeError as err:
        raise _invalid(f"{name} must be UTF-8 text") from err


def _invalid(message: str) -> IntakeError:
    return IntakeError(message, code="invalid_request")
