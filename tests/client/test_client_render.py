"""What ``certbench status`` shows of the progress fields newer servers add (ETA, throughput,
estimated work) and what it shows without them; what the tables print to a pipe."""

from __future__ import annotations

from rich.console import Console

from certbench.cli.client_render import (
    duration,
    eta_text,
    leaderboard_table,
    results_table,
    run_bar,
    status_table,
)
from certbench.client import Leaderboard, Results, Submission, TestSetProgress


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
            "estimate": {
                "forward_passes": 1_500_150_000,
                "seconds": 7384.0,
                "basis": "measured",
                "flops": 759_535_437_000_000_000,
            },
        }
    )
    text = _text(status_table(running, [TestSetProgress("clean", 4, 10)]))
    assert "40.0% (shards 4/10)" in text
    assert "3 min 20 s" in text and eta_text(running) == "ETA 3 min 20 s"
    assert "8,120 samples/s, 0.081 images/s" in text
    assert "1,500,150,000 forward passes (7.6e+17 FLOPs), ≈ 2 h 03 min (measured)" in text
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


def _submission(**fields: object) -> Submission:
    return Submission.from_json({"id": 9, "benchmark": "cifar10", "progress": 0.0, **fields})


def _bar_line(text: str, description: str) -> str:
    """The last rendering of the live bar whose description is ``description``."""
    return [line for line in text.splitlines() if line.startswith(description)][-1]


def test_the_live_bar_of_submit_wait_shows_eta_and_throughput():
    """What ``submit --wait`` draws while a run goes (``run_bar``, fed by ``Client.wait``): the
    fraction done, the server's ETA and the measured throughput; a change of state is a line."""
    console = Console(record=True, width=160)
    queued = _submission(state="queued", queue_position=2)
    running = _submission(
        state="running",
        message="certifying",
        progress=0.4,
        eta_seconds=200.0,
        throughput={"samples_per_second": 8120.5, "images_per_second": 0.081},
    )
    with run_bar(console, queued) as update:
        update(queued)
        update(running)
    text = console.export_text()
    assert "submission 9: queued" in text and "submission 9: running — certifying" in text
    bar = _bar_line(text, "#9 running")
    assert " 40%" in bar and "ETA 3 min 20 s" in bar
    assert "8,120 samples/s, 0.081 images/s" in bar


def test_the_live_bar_shows_the_queue_position_then_drops_the_eta_at_the_end():
    console = Console(record=True, width=160)
    queued = _submission(state="queued", queue_position=1)
    with run_bar(console, queued) as update:
        update(queued)
    assert "#1 in queue" in _bar_line(console.export_text(), "#9 queued")
    with run_bar(console, queued) as update:
        update(_submission(state="running", progress=0.5, eta_seconds=60.0))
        update(_submission(state="finished", progress=1.0, eta_seconds=0.0))
    bar = _bar_line(console.export_text(), "#9 finished")
    assert "100%" in bar and "ETA" not in bar and "in queue" not in bar


def _piped(*renderables: object) -> str:
    """What a command prints to a pipe (not a terminal), whatever the terminal's width says."""
    import io

    from certbench.cli.output import make_console

    out = io.StringIO()
    console = make_console(file=out)
    for renderable in renderables:
        console.print(renderable)
    return out.getvalue()


def test_piped_tables_print_every_label_in_full(monkeypatch):
    """Issue 34 §5: piped, rich assumed 80 columns and cut "r=0.…" and "abst…"; a pipe gets
    every label whole, no ellipsis and no box lines."""
    monkeypatch.setenv("COLUMNS", "80")
    radii = ["0", "0.25", "0.5", "0.75", "1"]
    results = Results.from_json(
        {
            "submission_id": 7,
            "benchmark": "cifar10-c",
            "model_name": "LeNet-5, Gaussian augmentation with consistency regularisation",
            "state": "finished",
            "results": [
                {
                    "test_set": f"gaussian_noise_severity_{s}",
                    "acr": 0.41,
                    "count": 500,
                    "abstain_rate": 0.123,
                    "certified_accuracy": dict.fromkeys(radii, 0.5),
                }
                for s in range(1, 4)
            ],
        }
    )
    text = _piped(results_table(results))
    assert "…" not in text and "│" not in text and "━" not in text
    header = next(line for line in text.splitlines() if "test set" in line)
    radius_words = [word for r in radii for word in ("cert.", "acc.", f"r={r}")]
    assert header.split() == ["test", "set", "images", "ACR", *radius_words, "abstain"]
    assert "gaussian_noise_severity_3" in text
    assert "LeNet-5, Gaussian augmentation with consistency regularisation (#7)" in text


def test_the_leaderboard_table_says_which_column_it_sorted_by():
    """Issue 34 §7: ``--sort acr`` is answered with the key used and the column's label."""
    board = Leaderboard.from_json(
        {
            "benchmark": "demo-digits",
            "sort": "macr",
            "sort_label": "ACR",
            "order": "desc",
            "total": 0,
            "offset": 0,
            "limit": 50,
            "rows": [],
        }
    )
    assert "sorted by ACR (macr, desc)" in _piped(leaderboard_table(board))
    older = Leaderboard.from_json({**board.raw, "sort_label": None})  # a server before it
    assert "sorted by macr (desc)" in _piped(leaderboard_table(older))
