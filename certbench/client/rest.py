"""``Client``: the certbench REST API from Python, on httpx.

    from certbench.client import Client

    with Client("https://certbench.example.org", token="cb_...") as client:
        submission = client.submit("model.safetensors", "manifest.json")
        done = client.wait(submission.id, on_update=lambda s: print(s.state, s.progress))
        print(client.results(done.id).summary)

Every method returns a typed value (``certbench.client.types``) or raises a ``ClientError``
carrying the server's message, error code and HTTP status; ``ServerUnreachable`` names the URL
it could not reach.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, BinaryIO
from urllib.parse import quote

import httpx

from certbench import __version__
from certbench.client.config import DEFAULT_SERVER, normalize_server, resolve
from certbench.client.errors import (
    ClientError,
    HashMismatchError,
    ServerUnreachable,
    WaitTimeout,
    for_status,
)
from certbench.client.types import (
    EntryWeights,
    Leaderboard,
    Me,
    Results,
    Submission,
    TestSetProgress,
)
from certbench.data import UnknownLicenseError, canonical_license

API = "/api/v1"
#: (bytes done, bytes total) of an upload or download.
ByteProgress = Callable[[int, int], None]
#: Polls ``wait`` tolerates in a row without an answer (a server restarting) before it gives up.
UNREACHABLE_POLLS = 5
CHUNK = 1024 * 1024


class _ReportingFile:
    """A binary file that reports how far it has been read: httpx streams multipart file parts
    by calling ``read``, so the position after each read is the upload's progress."""

    def __init__(self, handle: BinaryIO, total: int, callback: ByteProgress) -> None:
        self._handle = handle
        self._total = total
        self._callback = callback

    def read(self, size: int = -1) -> bytes:
        chunk = self._handle.read(size)
        self._callback(self._handle.tell(), self._total)
        return chunk

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self._handle.seek(offset, whence)

    def tell(self) -> int:
        return self._handle.tell()

    def fileno(self) -> int:
        return self._handle.fileno()


class Client:
    """A connection to one certbench server, optionally authenticated with an API token."""

    def __init__(
        self,
        server: str = DEFAULT_SERVER,
        token: str | None = None,
        *,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.server = normalize_server(server)
        headers = {"User-Agent": f"certbench-client/{__version__}"}
        if token:
            headers["Authorization"] = f"Bearer {token.strip()}"
        self._http = httpx.Client(
            base_url=self.server,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            transport=transport,
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- transport ---------------------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Send a request; raise ClientError for an error status, ServerUnreachable when no
        response came back."""
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as err:
            raise self._unreachable(err) from err
        self._raise_for_status(response)
        return response

    @contextmanager
    def _stream(self, method: str, path: str) -> Iterator[httpx.Response]:
        try:
            with self._http.stream(method, path) as response:
                if response.is_error:
                    response.read()
                    self._raise_for_status(response)
                yield response
        except httpx.TransportError as err:
            raise self._unreachable(err) from err

    def _unreachable(self, err: httpx.TransportError) -> ServerUnreachable:
        what = type(err).__name__
        detail = str(err) or what
        return ServerUnreachable(
            f"cannot reach the certbench server at {self.server} ({detail}); check the URL "
            "(--server or CERTBENCH_SERVER) and that the server is running (`certbench serve`)",
            url=self.server,
        )

    def _raise_for_status(self, response: httpx.Response) -> None:
        if not response.is_error:
            return
        status = response.status_code
        code, message, details = None, None, None
        try:
            body = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        if isinstance(body, Mapping):
            code = body.get("code") if isinstance(body.get("code"), str) else None
            message = body.get("message") if isinstance(body.get("message"), str) else None
            details = body.get("details")
        if message is None:
            text = response.text.strip()[:200]
            message = (
                f"{response.request.method} {response.request.url} answered "
                f"{status} {response.reason_phrase}" + (f": {text}" if text else "")
            )
        raise for_status(status)(
            message, status=status, code=code, details=details, url=str(response.request.url)
        )

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._request(method, path, **kwargs)
        try:
            return response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ClientError(
                f"{self.server}{path} did not answer JSON; is {self.server} a certbench server?",
                status=response.status_code,
            ) from err

    def _object(self, method: str, path: str, **kwargs: Any) -> Mapping[str, Any]:
        body = self._json(method, path, **kwargs)
        if not isinstance(body, Mapping):
            raise ClientError(f"{self.server}{path} answered {type(body).__name__}, not an object")
        return body

    # -- account -----------------------------------------------------------------------------

    def me(self) -> Me:
        """The token's account and quota (checks that the token works)."""
        return Me.from_json(self._object("GET", f"{API}/me"))

    # -- submissions -------------------------------------------------------------------------

    def submit(
        self,
        weights: str | Path,
        manifest: str | Path | Mapping[str, Any],
        *,
        private: bool = False,
        extra_data: bool = False,
        venue: str | None = None,
        weights_public: bool = False,
        weights_license: str | None = None,
        on_progress: ByteProgress | None = None,
    ) -> Submission:
        """Upload safetensors weights and a JSON manifest (a file, or the document itself).

        ``weights_public`` publishes the weights in the model zoo under ``weights_license`` (an
        SPDX identifier, ``certbench.data.licenses``) once the entry has finished. ``on_progress``
        is called with (bytes sent, bytes total) while the weights upload. Returns the new
        submission (``state == "duplicate"`` when identical to an existing one)."""
        weights = Path(weights)
        if weights_public and weights_license is None:
            raise ClientError(
                "publishing the weights needs a licence: pass weights_license (an SPDX "
                "identifier such as CC-BY-4.0 or MIT)",
                code="license_required",
            )
        refuse_swapped(weights, manifest)
        manifest_bytes = _manifest_bytes(manifest)
        form = {"private": _flag(private), "extra_data": _flag(extra_data)}
        if venue:
            form["venue"] = venue
        if weights_public:
            form["weights_public"] = "true"
        if weights_license is not None:
            form["weights_license"] = _license(weights_license)
        try:
            handle = weights.open("rb")
        except OSError as err:
            raise ClientError(f"cannot read weights file {str(weights)!r}: {err.strerror}") from err
        with handle:
            total = os.fstat(handle.fileno()).st_size
            part: IO[bytes] | _ReportingFile = (
                _ReportingFile(handle, total, on_progress) if on_progress else handle
            )
            files = {
                "weights": (weights.name, part, "application/octet-stream"),
                "manifest": ("manifest.json", manifest_bytes, "application/json"),
            }
            body = self._object("POST", f"{API}/submissions", data=form, files=files)
        return Submission.from_json(body)

    def submission(self, submission_id: int) -> Submission:
        """State, reason, message, progress, ETA of one of your submissions."""
        return Submission.from_json(self._object("GET", f"{API}/submissions/{submission_id}"))

    def progress(self, submission_id: int) -> list[TestSetProgress]:
        """Images certified so far on each test set: the report's ``test_sets`` (servers from
        before it covered every stage answered with a bare list of these rows)."""
        body = self._json("GET", f"{API}/submissions/{submission_id}/progress")
        rows = body.get("test_sets", []) if isinstance(body, Mapping) else body
        if not isinstance(rows, list):
            rows = []
        return [TestSetProgress.from_json(r) for r in rows if isinstance(r, Mapping)]

    def cancel(self, submission_id: int) -> Submission:
        """Cancel a waiting or running submission (409 ClientError once it has ended)."""
        body = self._object("POST", f"{API}/submissions/{submission_id}/cancel")
        return Submission.from_json(body)

    def wait(
        self,
        submission_id: int,
        *,
        on_update: Callable[[Submission], None] | None = None,
        interval: float = 1.0,
        max_interval: float = 15.0,
        timeout: float | None = None,
    ) -> Submission:
        """Poll until the submission reaches a terminal state and return it.

        Polls every ``interval`` seconds while it moves, backing off by 1.5x up to
        ``max_interval`` while nothing changes. ``on_update`` sees every answer. A server that
        does not answer for UNREACHABLE_POLLS polls in a row (a restart) ends the wait with
        ServerUnreachable; ``timeout`` seconds without a terminal state with WaitTimeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay, last, misses = interval, None, 0
        while True:
            try:
                current = self.submission(submission_id)
                misses = 0
            except ServerUnreachable:
                misses += 1
                if misses >= UNREACHABLE_POLLS:
                    raise
                current = None
            if current is not None:
                if on_update is not None:
                    on_update(current)
                if current.terminal:
                    return current
                moved = last is None or (current.state, current.progress) != last
                delay = interval if moved else min(delay * 1.5, max_interval)
                last = (current.state, current.progress)
            if deadline is not None and time.monotonic() + delay > deadline:
                state = current.state if current is not None else "unknown"
                raise WaitTimeout(
                    f"submission {submission_id} is still {state} after {timeout:g} s; "
                    f"`certbench status {submission_id}` follows it later"
                )
            time.sleep(delay)

    def publish_weights(self, submission_id: int, license: str) -> Submission:
        """Publish the entry's weights in the model zoo under ``license`` (an SPDX identifier,
        ``certbench.data.licenses``; any letter case). Only the submitter can."""
        body = {"public": True, "license": _license(license)}
        return Submission.from_json(
            self._object("PATCH", f"{API}/submissions/{submission_id}/weights", json=body)
        )

    def withdraw_weights(self, submission_id: int) -> Submission:
        """Stop serving the entry's weights (owner, or an admin's takedown)."""
        return Submission.from_json(
            self._object(
                "PATCH", f"{API}/submissions/{submission_id}/weights", json={"public": False}
            )
        )

    # -- results -----------------------------------------------------------------------------

    def results(self, submission_id: int) -> Results:
        """Results per test set and the summary (empty until the run has ended)."""
        return Results.from_json(self._object("GET", f"{API}/results/{submission_id}"))

    def leaderboard(
        self,
        benchmark: str,
        *,
        sort: str | None = None,
        order: str | None = None,
        offset: int | None = None,
        limit: int | None = None,
        **filters: str | float | bool | None,
    ) -> Leaderboard:
        """A page of ``benchmark``'s leaderboard; ``filters`` are the endpoint's query
        parameters (sigma, architecture, extra_data, venue, search, ...)."""
        params: dict[str, Any] = {"sort": sort, "order": order, "offset": offset, "limit": limit}
        params.update(filters)
        query = {
            k: (str(v).lower() if isinstance(v, bool) else v)
            for k, v in params.items()
            if v is not None
        }
        body = self._object("GET", f"{API}/leaderboards/{_segment(benchmark)}", params=query)
        return Leaderboard.from_json(body)

    def export(
        self,
        benchmark: str,
        *,
        fmt: str = "latex",
        ids: Sequence[int] | None = None,
        table: str | None = None,
        columns: Sequence[str] | None = None,
        **params: str | float | int | None,
    ) -> str:
        """A paper-ready export (``fmt``: latex, csv or bibtex) of a leaderboard page
        (``params``: sort, order, limit, offset, sigma) or, with ``ids``, of a comparison
        (``table``: entries or paired, for CSV); ``columns``: keys or labels (default: the
        papers' layout in LaTeX, every column in CSV)."""
        path = f"{API}/leaderboards/{_segment(benchmark)}"
        query: dict[str, Any] = {"format": fmt}
        if columns:
            query["columns"] = list(columns)
        if ids:
            path += "/compare/export"
            query["ids"] = [str(i) for i in ids]
            if table:
                query["table"] = table
        else:
            path += "/export"
            query.update({k: v for k, v in params.items() if v is not None})
        return self._request("GET", path, params=query).text

    # -- model zoo ---------------------------------------------------------------------------

    def entry(self, submission_id: int) -> EntryWeights:
        """Benchmark, licence, SHA-256 and manifest of an entry whose weights you may download
        (PermissionDenied when they are not published, NotFound for entries you cannot see)."""
        return EntryWeights.from_json(self._object("GET", f"{API}/entries/{submission_id}"))

    def download_weights(
        self,
        submission_id: int,
        dest: str | Path,
        *,
        sha256: str,
        on_progress: ByteProgress | None = None,
    ) -> Path:
        """Stream an entry's weights to ``dest``, verifying their SHA-256 against ``sha256``
        (from ``entry()``) and the server's X-Weights-SHA256 header. The file appears at
        ``dest`` only once verified; otherwise HashMismatchError and nothing is left behind."""
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
        try:
            digest = hashlib.sha256()
            with (
                os.fdopen(fd, "wb") as out,
                self._stream("GET", f"{API}/entries/{submission_id}/weights") as response,
            ):
                header = response.headers.get("x-weights-sha256")
                total = int(response.headers.get("content-length") or 0)
                done = 0
                for chunk in response.iter_bytes(CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    if on_progress is not None:
                        on_progress(done, total)
            got = digest.hexdigest()
            for source, expected in (("the entry", sha256), ("X-Weights-SHA256", header)):
                if expected is not None and got != expected.lower():
                    raise HashMismatchError(
                        f"the weights of entry {submission_id} downloaded from {self.server} "
                        f"have SHA-256 {got}, but {source} says {expected}: the file is "
                        "corrupted and was not kept",
                        url=self.server,
                    )
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return dest


def refuse_swapped(weights: Path, manifest: str | Path | Mapping[str, Any]) -> None:
    """Refuse, before anything is uploaded, a weights file that is a JSON document or a manifest
    file that is a safetensors file: the two options were exchanged (the server would answer
    that the manifest is too large)."""
    from certbench.nets import FILES_SWAPPED, looks_like_json, looks_like_safetensors

    manifest_swapped = not isinstance(manifest, Mapping) and looks_like_safetensors(
        _head(Path(manifest))
    )
    if manifest_swapped or looks_like_json(_head(weights)):
        raise ClientError(FILES_SWAPPED, code="files_swapped")


def _head(path: Path, size: int = 64) -> bytes:
    """The first bytes of a file (empty when unreadable: the upload then names the error)."""
    try:
        with path.open("rb") as handle:
            return handle.read(size)
    except OSError:
        return b""


def _manifest_bytes(manifest: str | Path | Mapping[str, Any]) -> bytes:
    if isinstance(manifest, Mapping):
        return json.dumps(dict(manifest)).encode()
    path = Path(manifest)
    try:
        return path.read_bytes()
    except OSError as err:
        raise ClientError(f"cannot read manifest file {str(path)!r}: {err.strerror}") from err


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _license(value: str) -> str:
    """The canonical SPDX spelling, checked before anything is uploaded."""
    try:
        return canonical_license(value)
    except UnknownLicenseError as err:
        raise ClientError(str(err), code="invalid_license") from err


def _segment(value: str) -> str:
    """A path segment, percent-encoded (a benchmark name never needs it; a typo might)."""
    return quote(value, safe="")


def connect(server: str | None = None, token: str | None = None) -> Client:
    """A Client for ``server``/``token`` resolved as the CLI does: arguments, then
    CERTBENCH_SERVER / CERTBENCH_TOKEN, then the config file of ``certbench login``."""
    found = resolve(server, token)
    return Client(found.server, found.token)
