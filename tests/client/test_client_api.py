"""``certbench.client.Client`` against the real app served over TCP: submit with upload
progress, status, per-test-set progress, wait, results, leaderboard, cancel, and the errors
(the server's message, code and HTTP status; an unreachable server named by its URL)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from certbench.client import (
    AuthenticationFailed,
    Client,
    ClientError,
    NotFound,
    ServerUnreachable,
    Submission,
    WaitTimeout,
)
from tests.support.client import Live, model_files


def test_submit_follow_and_read_results(live: Live, tmp_path: Path):
    weights, manifest_path = model_files(tmp_path)
    sent: list[tuple[int, int]] = []
    with Client(live.url, live.alice) as client:
        created = client.submit(
            weights, manifest_path, on_progress=lambda done, total: sent.append((done, total))
        )
        assert isinstance(created, Submission)
        assert created.state == "submitted" and created.benchmark == "tiny"
        assert created.weights_size == weights.stat().st_size
        size = weights.stat().st_size
        assert sent and sent[-1] == (size, size)
        assert [d for d, _ in sent] == sorted(d for d, _ in sent)
        assert client.submission(created.id).state == "submitted"
        progress = client.progress(created.id)
        assert [(p.test_set, p.images_done, p.images_total) for p in progress] == [
            ("set0", 0, 3),
            ("set1", 0, 3),
        ]
        seen: list[str] = []
        worker = threading.Timer(0.3, live.finish, args=(created.id,))
        worker.start()
        try:
            done = client.wait(created.id, on_update=lambda s: seen.append(s.state), interval=0.05)
        finally:
            worker.join()
        assert done.state == "finished" and done.terminal and not done.unsuccessful
        assert seen[0] == "submitted" and seen[-1] == "finished"
        results = client.results(created.id)
        assert [r.test_set for r in results.results] == ["set0", "set1"]
        assert results.summary is not None and isinstance(results.summary["macr"], float)
        assert results.results[0].acr is not None and "0.5" in results.results[0].certified_accuracy
        board = client.leaderboard("tiny", sort="macr", order="desc", limit=5)
        assert [row.submission_id for row in board.rows] == [created.id]
        assert board.rows[0].model_name == "resnet20 seed 0" and board.rows[0].owner == "alice"
        assert client.me().name == "alice"


def test_server_errors_carry_message_code_and_status(live: Live, tmp_path: Path):
    weights, manifest_path = model_files(tmp_path, benchmark="no-such-benchmark")
    with Client(live.url) as anonymous, pytest.raises(AuthenticationFailed) as unauthenticated:
        anonymous.me()
    assert unauthenticated.value.status == 401 and unauthenticated.value.code == "unauthenticated"
    with Client(live.url, "cb_not_a_real_token") as forged, pytest.raises(AuthenticationFailed):
        forged.submission(1)
    with Client(live.url, live.alice) as alice:
        with pytest.raises(ClientError) as refused:
            alice.submit(weights, manifest_path)
        assert refused.value.status == 422 and refused.value.code == "benchmark_mismatch"
        assert "no-such-benchmark" in refused.value.message
        assert "HTTP 422" in str(refused.value) and "benchmark_mismatch" in str(refused.value)
        good_weights, good_manifest = model_files(tmp_path / "good")
        mine = alice.submit(good_weights, good_manifest)
        with pytest.raises(NotFound) as missing:
            alice.leaderboard("no-such-benchmark")
        assert missing.value.status == 404
        with pytest.raises(ClientError) as bad_sort:
            alice.leaderboard("tiny", sort="no_such_key")
        assert bad_sort.value.status == 422
        assert alice.cancel(mine.id).state == "cancelled"
        with pytest.raises(ClientError) as ended:
            alice.cancel(mine.id)
        assert ended.value.status == 409 and "cancelled" in ended.value.message
    with Client(live.url, live.bob) as bob, pytest.raises(NotFound) as not_yours:
        bob.submission(mine.id)
    assert "does not exist or is not yours" in not_yours.value.message


def test_an_unreachable_server_is_named(tmp_path: Path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with Client(url) as client, pytest.raises(ServerUnreachable) as err:
        client.leaderboard("tiny")
    assert url in str(err.value) and err.value.url == url and err.value.status is None


def test_wait_gives_up_after_its_timeout(live: Live, tmp_path: Path):
    weights, manifest_path = model_files(tmp_path)
    with Client(live.url, live.alice) as client:
        created = client.submit(weights, manifest_path)
        with pytest.raises(WaitTimeout) as err:
            client.wait(created.id, interval=0.05, timeout=0.3)
    assert f"certbench status {created.id}" in str(err.value)


def test_a_bad_licence_is_refused_before_uploading(live: Live, tmp_path: Path):
    weights, manifest_path = model_files(tmp_path)
    with Client(live.url, live.alice) as client:
        with pytest.raises(ClientError) as err:
            client.submit(weights, manifest_path, weights_public=True, weights_license="GPL3")
        assert err.value.status is None and err.value.code == "invalid_license"
        assert "GPL-3.0-only" in err.value.message
        with pytest.raises(ClientError) as unnamed:
            client.submit(weights, manifest_path, weights_public=True)
        assert unnamed.value.code == "license_required" and unnamed.value.status is None
        assert client.me().quota is not None and client.me().quota.submissions_today == 0
