"""The upload path under attack and under load (issue 19 §2, §3, §4, §7): the token and the quotas
are checked before the body is read, the weights stream to disk, concurrent uploads cannot beat
the quotas or the dedup, and malformed or tricky parts get a clear 4xx.

The concurrency and streaming tests use a real uvicorn server (in a thread of this process) and
real sockets, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import io
import json
import pickle
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import torch
import uvicorn
from fastapi.testclient import TestClient
from safetensors.torch import load, save
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.main import create_app
from models.core.settings import Settings
from models.db.entities import Submission
from models.db.states import SubmissionState
from models.submissions.artifacts import INCOMING_DIR
from models.submissions.quotas import quota_usage
from tests.support import timing
from tests.support.api import Actors, drain_validations
from tests.support.service_factories import make_user, manifest, multipart, weights_bytes

URL = "/api/v1/submissions"
BOUNDARY = "certbench-test-boundary"


@pytest.fixture
def serve(settings: Settings) -> Iterator[Callable[..., tuple[str, int]]]:
    """Start the app (with settings changes) on a real uvicorn server; returns (base, port)."""
    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(**changes: object) -> tuple[str, int]:
        app = create_app(settings.model_copy(update=changes))
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + timing.seconds(30)
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.05)
        servers.append((server, thread))
        return f"http://127.0.0.1:{port}", port

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=timing.seconds(30))


def _parts(weights: bytes, document: dict | bytes) -> tuple[bytes, bytes]:
    """(multipart body up to the weights' bytes, the rest) for a hand-made request."""
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="weights"; '
        f'filename="w.safetensors"\r\nContent-Type: application/octet-stream\r\n\r\n'
    ).encode()
    tail = (
        (
            f'\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name="manifest"; '
            f'filename="m.json"\r\nContent-Type: application/json\r\n\r\n'
        ).encode()
        + body
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )
    return head + weights, tail


def _open_upload(port: int, headers: dict[str, str], length: int, first: bytes) -> socket.socket:
    """Send the request line, headers and the first bytes of a body of ``length`` bytes."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timing.seconds(20))
    lines = [f"POST {URL} HTTP/1.1", f"Host: 127.0.0.1:{port}",
             f"Content-Type: multipart/form-data; boundary={BOUNDARY}",
             f"Content-Length: {length}", *(f"{k}: {v}" for k, v in headers.items())]  # fmt: skip
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + first)
    return sock


def _status_before_the_body_ends(sock: socket.socket) -> int:
    """The status the server answers while most of the body is still unsent."""
    try:
        answer = sock.recv(4096)
    except TimeoutError as err:
        raise AssertionError("no answer until the whole body is sent: it was read first") from err
    finally:
        sock.close()
    return int(answer.split(b" ", 2)[1])


# ---- checks before the body --------------------------------------------------------------------


def test_a_bad_token_is_refused_before_the_body_is_read(serve, actors: Actors, settings):
    _, port = serve()
    sock = _open_upload(port, {"Authorization": "Bearer cb_wrong"}, 100_000_000, b"x" * 65536)
    assert _status_before_the_body_ends(sock) == 401
    sock = _open_upload(port, {}, 100_000_000, b"x" * 65536)
    assert _status_before_the_body_ends(sock) == 401
    assert not (settings.artifacts_dir / INCOMING_DIR).exists() or not any(
        (settings.artifacts_dir / INCOMING_DIR).iterdir()
    )


def test_quotas_are_checked_before_the_body_is_read(serve, actors: Actors):
    base, port = serve(quota_concurrent=1)
    first = httpx.post(
        base + URL,
        headers=actors.alice,
        timeout=timing.seconds(60),
        **multipart(weights_bytes(), manifest()),
    )
    assert first.status_code == 202, first.text
    sock = _open_upload(port, actors.alice, 100_000_000, b"x" * 65536)
    assert _status_before_the_body_ends(sock) == 429


def test_weights_stream_to_disk_while_the_body_arrives(serve, actors: Actors, settings, session):
    _, port = serve()
    weights = weights_bytes()
    start, rest = _parts(weights, manifest())
    half = len(start) - len(weights) // 2
    sock = _open_upload(port, actors.alice, len(start) + len(rest), start[:half])
    incoming = settings.artifacts_dir / INCOMING_DIR

    def staged() -> list[Path]:
        return (
            [p for p in incoming.glob("*.tmp") if p.stat().st_size > 0] if incoming.exists() else []
        )

    deadline = time.monotonic() + timing.seconds(20)
    while not staged() and time.monotonic() < deadline:
        time.sleep(0.05)
    (partial,) = staged()  # half the weights are on disk while the rest is unsent
    assert weights.startswith(partial.read_bytes())
    sock.sendall(start[half:] + rest)
    answer = sock.recv(65536)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 202"), answer[:300]
    assert list(incoming.glob("*")) == []  # moved into the store, not copied
    assert len(drain_validations(settings)) == 1


# ---- races, enforced in the database -----------------------------------------------------------


def _together(count: int, send: Callable[[int, httpx.Client], httpx.Response]) -> list[int]:
    """Run ``send`` from ``count`` threads released at the same instant; their statuses."""
    barrier = threading.Barrier(count)

    def one(index: int) -> int:
        with httpx.Client(timeout=timing.seconds(120)) as client:
            barrier.wait()
            return send(index, client).status_code

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


def test_concurrent_uploads_cannot_beat_the_concurrency_quota(
    serve, actors: Actors, session: Session
):
    base, _ = serve(quota_concurrent=2, quota_submissions_per_day=100)
    weights = weights_bytes()

    def send(index: int, client: httpx.Client) -> httpx.Response:
        document = manifest(name=f"model-{index}")
        return client.post(base + URL, headers=actors.alice, **multipart(weights, document))

    statuses = Counter(_together(8, send))
    assert statuses == Counter({202: 2, 429: 6})
    session.expire_all()
    alice = session.get(Submission, 1).user
    assert quota_usage(session, alice).active == 2


def test_identical_concurrent_uploads_make_one_run(serve, settings, session: Session, actors):
    base, _ = serve()
    tokens = [make_user(session, f"user{i}")[1] for i in range(6)]
    weights = weights_bytes()

    def send(index: int, client: httpx.Client) -> httpx.Response:
        headers = {"Authorization": f"Bearer {tokens[index]}"}
        return client.post(base + URL, headers=headers, **multipart(weights, manifest()))

    statuses = Counter(_together(6, send))
    assert statuses == Counter({202: 1, 200: 5})
    session.expire_all()
    rows = session.scalars(select(Submission)).all()
    (original,) = [s for s in rows if s.state == SubmissionState.SUBMITTED]
    assert {s.duplicate_of_id for s in rows if s is not original} == {original.id}
    assert drain_validations(settings) == [original.id]


# ---- tricky parts --------------------------------------------------------------------------------


def _valid_with_first_byte(prefix: bytes) -> bytes:
    """The factory weights re-saved with metadata padding so the file starts with ``prefix``."""
    state = load(weights_bytes())
    base = struct.unpack("<Q", save(state, metadata={"n": ""})[:8])[0]
    value = int.from_bytes(prefix, "little")
    target = base + (value - base) % (256 ** len(prefix))
    for pad in range(max(0, target - base - 8), target - base + 9):
        blob = save(state, metadata={"n": "x" * pad})
        if blob.startswith(prefix):
            return blob
    raise AssertionError(f"no padding starts the file with {prefix!r}")


@pytest.mark.parametrize("prefix", [b"\x80", b"PK"], ids=["pickle-byte", "zip-bytes"])
def test_valid_files_starting_like_pickles_are_accepted(client: TestClient, actors, prefix):
    weights = _valid_with_first_byte(prefix)
    response = client.post(URL, headers=actors.alice, **multipart(weights, manifest()))
    assert response.status_code == 202, response.text


def test_pickles_are_named_whatever_their_protocol(client: TestClient, actors: Actors, session):
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        blob = pickle.dumps({"1.fc.weight": [[0.0] * 64] * 10}, protocol=protocol)
        response = client.post(URL, headers=actors.alice, **multipart(blob, manifest()))
        assert response.status_code == 422, (protocol, response.text)
        assert response.json()["code"] == "not_safetensors"
        assert "pickle" in response.json()["message"], (protocol, response.json()["message"])
    assert session.scalar(select(func.count()).select_from(Submission)) == 0


def test_a_header_of_a_million_tensors_is_refused_unparsed(client: TestClient, actors: Actors):
    bomb = save({f"t{i}": torch.zeros(0) for i in range(50_000)})
    response = client.post(URL, headers=actors.alice, **multipart(bomb, manifest()))
    assert response.status_code == 422 and response.json()["code"] == "weights_header_too_large"
    assert "above the limit" in response.json()["message"]


def test_two_weights_parts_are_refused(client: TestClient, actors: Actors, session: Session):
    weights = weights_bytes()
    files = [
        ("weights", ("a.safetensors", io.BytesIO(weights), "application/octet-stream")),
        ("weights", ("b.safetensors", io.BytesIO(weights), "application/octet-stream")),
        ("manifest", ("m.json", io.BytesIO(json.dumps(manifest()).encode()), "application/json")),
    ]
    response = client.post(URL, headers=actors.alice, files=files)
    assert response.status_code == 422 and "'weights' was sent twice" in response.json()["message"]
    files[1] = ("notes", ("n.txt", io.BytesIO(b"hi"), "text/plain"))
    response = client.post(URL, headers=actors.alice, files=files)
    assert response.status_code == 422 and "unknown form part 'notes'" in response.json()["message"]
    assert session.scalar(select(func.count()).select_from(Submission)) == 0


def test_a_manifest_with_a_byte_order_mark_is_accepted(client: TestClient, actors: Actors):
    document = b"\xef\xbb\xbf" + json.dumps(manifest()).encode()
    response = client.post(URL, headers=actors.alice, **multipart(weights_bytes(), document))
    assert response.status_code == 202, response.text


# ---- what the client learns ----------------------------------------------------------------------


def test_a_queue_outage_names_the_submission_and_costs_no_quota(
    actors: Actors, settings: Settings, session: Session
):
    down = settings.model_copy(
        update={"broker_url": "redis://127.0.0.1:1/0", "quota_failed_per_day": 1}
    )
    with TestClient(create_app(down), raise_server_exceptions=False) as client:
        response = client.post(URL, headers=actors.alice, **multipart(weights_bytes(), manifest()))
        assert response.status_code == 503 and response.headers["retry-after"]
        (detail,) = response.json()["details"]
        assert f"Submission {detail['submission_id']}" in response.json()["message"]
        status = client.get(f"{URL}/{detail['submission_id']}", headers=actors.alice).json()
        assert status["reason"] == "queue_unavailable"
        me = client.get("/api/v1/me", headers=actors.alice).json()
        assert me["quota"]["unsuccessful_today"] == 0
    session.expire_all()
    alice = session.get(Submission, detail["submission_id"]).user
    assert quota_usage(session, alice).unsuccessful_today == 0


def test_duplicate_of_hides_another_users_private_original(client: TestClient, actors: Actors):
    weights = weights_bytes()
    original = client.post(
        URL, headers=actors.bob, **multipart(weights, manifest(), private=True)
    ).json()
    copy = client.post(URL, headers=actors.alice, **multipart(weights, manifest()))
    assert copy.status_code == 200 and copy.json()["state"] == "duplicate"
    assert copy.json()["duplicate_of"] is None
    assert str(original["id"]) not in copy.json()["message"]
    for url in (f"{URL}/{copy.json()['id']}", URL):
        assert str(original["id"]) not in json.dumps(
            [s.get("duplicate_of") for s in _submissions(client.get(url, headers=actors.alice))]
        )
    seen_by_admin = client.get(f"{URL}/{copy.json()['id']}", headers=actors.admin).json()
    assert seen_by_admin["duplicate_of"] == original["id"]


def _submissions(response: httpx.Response) -> list[dict]:
    body = response.json()
    return body.get("items", [body])


def test_the_openapi_document_describes_optional_tokens_and_the_upload(client: TestClient):
    spec = client.get("/openapi.json").json()
    for path in ("/api/v1/benchmarks", "/api/v1/leaderboards/{benchmark}",
                 "/api/v1/results/{submission_id}"):  # fmt: skip
        operation = spec["paths"][path]["get"]
        assert operation["security"] == [{}, {"HTTPBearer": []}], path
        assert "send none" in operation["responses"]["401"]["description"]
    assert spec["paths"]["/api/v1/submissions"]["get"]["security"] == [{"HTTPBearer": []}]
    body = spec["paths"]["/api/v1/submissions"]["post"]["requestBody"]["content"]
    form = body["multipart/form-data"]
    assert form["schema"]["properties"]["manifest"]["$ref"] == "#/components/schemas/Manifest"
    assert form["encoding"]["manifest"]["contentType"] == "application/json"
    assert spec["components"]["schemas"]["Metadata"]["properties"]["name"]["maxLength"] == 128
    wrong = client.put(URL)
    assert wrong.status_code == 405 and wrong.headers["allow"] == "GET, POST"
