"""A missing or bad token is refused before any byte of an upload is read (issue 34 §6: "a bad
token is refused only after the whole file is uploaded").

The API answers 401 before it reads the body; ``certbench submit`` checks the token with a
bodiless request before it starts the upload, since an HTTP client sends the whole body before it
reads the answer. Both are measured by what was read: the app's receive calls pull a streaming
body chunk by chunk, and the CLI's weights file reports every read.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import typer
from typer.testing import CliRunner

from api.main import create_app
from certbench.cli import client as client_commands
from certbench.client import rest
from tests.support.client import Live, model_files
from tests.support.service_factories import manifest, weights_bytes

T = TypeVar("T")

CHUNK = 64 * 1024
BOUNDARY = "certbench-token-test"


def _multipart_chunks(weights: bytes, document: bytes) -> list[bytes]:
    """A submission body (weights, then manifest) cut into CHUNK-sized pieces."""
    body = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="weights"; '
        'filename="w.safetensors"\r\nContent-Type: application/octet-stream\r\n\r\n'
    ).encode() + weights
    body += (
        (
            f'\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name="manifest"; '
            'filename="m.json"\r\nContent-Type: application/json\r\n\r\n'
        ).encode()
        + document
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )
    return [body[i : i + CHUNK] for i in range(0, len(body), CHUNK)]


async def _post_streaming(live: Live, headers: dict[str, str], chunks: list[bytes]
                          ) -> tuple[int, int]:  # fmt: skip
    """POST the chunks as a streaming body to the app; (status, chunks the app pulled)."""
    pulled = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal pulled
        for chunk in chunks:
            pulled += 1
            yield chunk

    transport = httpx.ASGITransport(app=create_app(live.settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.post(
            "/api/v1/submissions",
            content=body(),
            headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}", **headers},
        )
    return response.status_code, pulled


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` in a thread of its own: a session fixture of another file in this test
    process (Playwright's synchronous API) may keep an event loop running in this thread."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


@pytest.mark.parametrize("token", [None, "cb_wrong"], ids=["missing", "bad"])
def test_the_api_refuses_the_token_before_reading_the_upload(live: Live, token: str | None):
    import json

    chunks = _multipart_chunks(weights_bytes(0), json.dumps(manifest()).encode())
    assert len(chunks) > 10  # a real upload: many pieces to read
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    status, pulled = _run(_post_streaming(live, headers, chunks))
    assert status == 401
    assert pulled == 0, f"the app read {pulled} of {len(chunks)} chunks before refusing"
    status, pulled = _run(_post_streaming(live, {"Authorization": f"Bearer {live.alice}"}, chunks))
    assert status == 202 and pulled == len(chunks)  # a good token: the body is read


def test_submit_with_a_bad_token_reads_no_byte_of_the_weights(
    live: Live, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    weights, manifest_path = model_files(tmp_path)
    read: list[int] = []
    real = rest._ReportingFile.read

    def counted(self: rest._ReportingFile, size: int = -1) -> bytes:
        chunk = real(self, size)
        read.append(len(chunk))
        return chunk

    monkeypatch.setattr(rest._ReportingFile, "read", counted)
    app = typer.Typer()
    app.callback()(lambda: None)
    client_commands.register(app)
    argv = ["submit", "--weights", str(weights), "--manifest", str(manifest_path),
            "--server", live.url]  # fmt: skip
    refused = CliRunner().invoke(app, [*argv, "--token", "cb_wrong"], env={"COLUMNS": "200"})
    assert refused.exit_code == 2, refused.output
    assert "HTTP 401" in refused.output
    assert sum(read) == 0, f"{sum(read)} of {weights.stat().st_size} bytes read for a bad token"
    accepted = CliRunner().invoke(app, [*argv, "--token", live.alice], env={"COLUMNS": "200"})
    assert accepted.exit_code == 0, accepted.output
    assert sum(read) == weights.stat().st_size  # the upload itself reads the whole file
