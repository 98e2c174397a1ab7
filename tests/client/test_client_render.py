"""What ``certbench status`` shows of the progress fields newer servers add (ETA, throughput,
estimated work) and what it shows without them."""

from __future__ import annotations

from rich.console import Console

from certbench.client import Submission, TestSetProgress
from certbench.client_render import duration, eta_text, status_table


def _text(table: object) -> str:
    console = Console(record=True, width=120)
    console.print(table)
    return console.export_text()


def test_status_shows_eta_throughput_and_estimate_when_the_server_sends_them():
    running = Submission.from_json(
        {
            "id": 9,
            "state": "running",
            "message": "certifying",
            "benchmark": "cifar10",
            "model_name": "resnet110",
            "sigma": 0.25,
            "architecture": "cifar_resnet110",
            "progress": 0.4,
            "shards_done": 4,
            "shards_total": 10,
            "eta_seconds": 200.0,
            "throughput": {"samples_per_second": 8120.5, "images_per_second": 0.081},
            "estimate": {"forward_passes": 1_500_150_000, "seconds": 7384.0, "basis": "measured"},
        }
    )
    text = _text(status_table(running, [TestSetProgress("clean", 4, 10)]))
    assert "40.0% (shards 4/10)" in text
    assert "3 min 20 s" in text and eta_text(running) == "ETA 3 min 20 s"
    assert "8,120 samples/s, 0.081 images/s" in text
    assert "1,500,150,000 forward passes, ≈ 2 h 03 min (measured)" in text
    assert "4/10 images" in text


def test_status_without_the_new_fields_shows_what_there_is():
    waiting = Submission.from_json(
        {"id": 3, "state": "queued", "progress": 0.0, "queue_position": 2, "benchmark": "tiny"}
    )
    text = _text(status_table(waiting, []))
    queue = next(line for line in text.splitlines() if "queue position" in line)
    assert queue.split("│")[2].strip() == "2"
    assert "ETA" not in text and "time left" not in text and "throughput" not in text
    assert eta_text(waiting) == "#2 in queue"
    assert [duration(s) for s in (None, 45, 200, 7384, 3 * 86400 + 4 * 3600)] == [
        "–", "45 s", "3 min 20 s", "2 h 03 min", "3 d 4 h"
    ]  # fmt: skip
