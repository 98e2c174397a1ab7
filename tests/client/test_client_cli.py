"""The client commands (``certbench login``, ``submit``, ``status``, ``results``,
``leaderboard``, ``download``, ``publish-weights``, ``cancel``) against the real app served over
TCP: what they print, where they find the server and token, and their exit status."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import typer
from click.testing import Result
from typer.testing import CliRunner

from certbench.cli import client as client_commands
from certbench.client.config import config_path, load_config
from models.boards import commands as results_commands
from tests.support.client import Live, model_files


@pytest.fixture
def cli() -> typer.Typer:
    """A fresh app with the client plug-in and the results maintenance plug-in, mounted as
    certbench.cli.app.register_plugins mounts them."""
    app = typer.Typer()
    app.callback()(lambda: None)
    client_commands.register(app)
    results_commands.register(app)
    return app


def run(app: typer.Typer, *args: str, **env: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", **env})


def test_login_submit_status_results_leaderboard(cli: typer.Typer, live: Live, tmp_path: Path):
    weights, manifest_path = model_files(tmp_path)
    refused = run(cli, "login", "--server", live.url, "--token", "cb_wrong")
    assert refused.exit_code == 2 and "HTTP 401" in refused.output
    assert "certbench login" in refused.output
    assert not config_path().exists()
    logged = run(cli, "login", "--server", live.url + "/", "--token", live.alice)
    assert logged.exit_code == 0, logged.output
    assert f"logged in to {live.url} as alice (submitter)" in logged.output
    assert stat.S_IMODE(config_path().stat().st_mode) == 0o600
    assert load_config().tokens == {live.url: live.alice} and load_config().server == live.url

    submitted = run(cli, "submit", "--weights", str(weights), "--manifest", str(manifest_path),
                    "--json")  # fmt: skip
    assert submitted.exit_code == 0, submitted.output
    created = json.loads(submitted.stdout)
    assert created["state"] == "submitted"
    waiting = run(cli, "status", str(created["id"]))
    assert waiting.exit_code == 0, waiting.output
    assert "submitted" in waiting.output and "0/3 images" in waiting.output
    live.finish(created["id"])
    done = run(cli, "status", str(created["id"]))
    assert "finished" in done.output and "3/3 images" in done.output
    table = run(cli, "results", str(created["id"]))
    assert table.exit_code == 0, table.output
    for text in ("set0", "set1", "mean ACR", "cert. acc. r=0.5"):
        assert text in table.output
    document = json.loads(run(cli, "results", str(created["id"]), "--json").stdout)
    assert document["submission_id"] == created["id"] and len(document["results"]) == 2
    board = run(cli, "leaderboard", "tiny")
    assert board.exit_code == 0 and "resnet20 seed 0" in board.output
    rows = json.loads(run(cli, "leaderboard", "tiny", "--json").stdout)["rows"]
    assert [r["submission_id"] for r in rows] == [created["id"]]
    bad_sort = run(cli, "leaderboard", "tiny", "--sort", "no_such_key")
    assert bad_sort.exit_code == 2 and "HTTP 422" in bad_sort.output
    assert run(cli, "results", "backfill-intervals", "--help").exit_code == 0

    assert run(cli, "logout").exit_code == 0
    assert load_config().tokens == {}
    anonymous = run(cli, "status", str(created["id"]), "--server", live.url)
    assert anonymous.exit_code == 2
    assert f"no API token for {live.url}" in anonymous.output


def test_token_and_server_precedence(cli: typer.Typer, live: Live, tmp_path: Path):
    weights, manifest_path = model_files(tmp_path)
    assert run(cli, "login", "--server", live.url, "--token", live.bob).exit_code == 0
    as_alice = run(cli, "submit", "--weights", str(weights), "--manifest", str(manifest_path),
                   "--json", CERTBENCH_TOKEN=live.alice)  # fmt: skip
    assert as_alice.exit_code == 0, as_alice.output
    entry = json.loads(as_alice.stdout)["id"]
    assert run(cli, "status", str(entry), CERTBENCH_TOKEN=live.alice).exit_code == 0
    stored_bob = run(cli, "status", str(entry))
    assert stored_bob.exit_code == 2 and "does not exist or is not yours" in stored_bob.output
    flag_bob = run(cli, "status", str(entry), "--token", live.bob, CERTBENCH_TOKEN=live.alice)
    assert flag_bob.exit_code == 2 and "HTTP 404" in flag_bob.output
    nowhere = "http://127.0.0.1:9"
    unreachable = run(cli, "leaderboard", "tiny", CERTBENCH_SERVER=nowhere)
    assert unreachable.exit_code == 2 and f"cannot reach the certbench server at {nowhere}" in (
        unreachable.output
    )
    assert run(cli, "leaderboard", "tiny", "--server", live.url,
               CERTBENCH_SERVER=nowhere).exit_code == 0  # fmt: skip


def test_submit_wait_follows_the_run_and_prints_its_results(
    cli: typer.Typer, live: Live, tmp_path: Path
):
    weights, manifest_path = model_files(tmp_path)
    with live.worker(live.finish):
        result = run(cli, "submit", "--weights", str(weights), "--manifest", str(manifest_path),
                     "--server", live.url, "--token", live.alice, "--wait")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "uploading model-0.safetensors" in result.output
    assert ": finished" in result.output
    for text in ("set0", "set1", "mean ACR"):
        assert text in result.stdout


def test_submit_wait_exits_1_with_the_reason_of_a_rejection(
    cli: typer.Typer, live: Live, tmp_path: Path
):
    weights, manifest_path = model_files(tmp_path)
    with live.worker(live.reject):
        result = run(cli, "submit", "--weights", str(weights), "--manifest", str(manifest_path),
                     "--server", live.url, "--token", live.alice, "--wait")  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "rejected (state_dict_mismatch)" in result.output
    assert "weights do not fit architecture" in result.output


def test_publish_and_download_weights(cli: typer.Typer, live: Live, tmp_path: Path):
    weights, manifest_path = model_files(tmp_path)
    alice = ("--server", live.url, "--token", live.alice)
    created = json.loads(run(cli, "submit", "--weights", str(weights), "--manifest",
                             str(manifest_path), "--json", *alice).stdout)  # fmt: skip
    entry = str(created["id"])
    live.finish(created["id"])
    out = tmp_path / "zoo"
    refused = run(cli, "download", entry, "--out", str(out), "--server", live.url)
    assert refused.exit_code == 2 and "has not published its weights" in refused.output
    assert not out.exists() or list(out.iterdir()) == []
    unnamed = run(cli, "publish-weights", entry, *alice)
    assert unnamed.exit_code == 2 and "--license is required" in unnamed.output
    bad = run(cli, "publish-weights", entry, "--license", "BSD", *alice)
    assert bad.exit_code == 2 and "BSD-3-Clause" in bad.output
    published = run(cli, "publish-weights", entry, "--license", "cc-by-4.0", *alice)
    assert published.exit_code == 0 and "published (CC-BY-4.0)" in published.output
    fetched = run(cli, "download", entry, "--out", str(out), "--server", live.url)
    assert fetched.exit_code == 0, fetched.output
    assert (out / f"tiny-entry-{entry}.safetensors").read_bytes() == weights.read_bytes()
    assert json.loads((out / f"tiny-entry-{entry}.json").read_text())["benchmark"] == "tiny"
    assert "verified" in fetched.output and "CC-BY-4.0" in fetched.output
    wrong = run(cli, "download", entry, "--benchmark", "cifar10", "--server", live.url)
    assert wrong.exit_code == 2 and "not 'cifar10'" in wrong.output
    listed = json.loads(run(cli, "leaderboard", "tiny", "--json", "--server", live.url).stdout)
    assert listed["rows"][0]["weights"]["license"] == "CC-BY-4.0"
    assert run(cli, "publish-weights", entry, "--withdraw", *alice).exit_code == 0
    gone = run(cli, "download", entry, "--out", str(tmp_path / "again"), "--server", live.url)
    assert gone.exit_code == 2 and "HTTP 403" in gone.output


def test_cancel(cli: typer.Typer, live: Live, tmp_path: Path):
    weights, manifest_path = model_files(tmp_path)
    alice = ("--server", live.url, "--token", live.alice)
    created = json.loads(run(cli, "submit", "--weights", str(weights), "--manifest",
                             str(manifest_path), "--json", *alice).stdout)  # fmt: skip
    cancelled = run(cli, "cancel", str(created["id"]), *alice)
    assert cancelled.exit_code == 0 and "cancelled" in cancelled.output
    again = run(cli, "cancel", str(created["id"]), *alice)
    assert again.exit_code == 2 and "HTTP 409" in again.output
    status = run(cli, "status", str(created["id"]), *alice)
    assert status.exit_code == 1 and "cancelled_by_user" in status.output


def test_the_commands_are_registered_and_light():
    """Listed in the plug-in group, and importing them loads neither httpx, rich nor torch
    (``certbench --help`` stays fast)."""
    assert "certbench.cli.client:register" in {
        e.value for e in entry_points(group="certbench.commands")
    }
    code = (
        "import sys, certbench.cli.client, models.boards.commands; "
        "print(sorted(m for m in ('httpx', 'rich', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _lenet_file(folder: Path) -> Path:
    from safetensors.torch import save_file

    from certbench.nets import build_classifier

    model = build_classifier("lenet5", num_classes=10, mean=(0.5,) * 3, std=(0.25,) * 3)
    path = folder / "lenet.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


def test_submit_wait_shows_an_architecture_mismatch_once(
    cli: typer.Typer, live: Live, tmp_path: Path
):
    """LeNet-5 weights declared as a ResNet-20: refused by the API from the header, one short
    line, nothing to wait for (issue 25 §4)."""
    _, manifest_path = model_files(tmp_path)
    lenet = str(_lenet_file(tmp_path))
    result = run(cli, "submit", "--weights", lenet, "--manifest", str(manifest_path),
                 "--server", live.url, "--token", live.alice, "--wait")  # fmt: skip
    assert result.exit_code == 2, result.output
    assert result.output.count("weights have 10 tensors of lenet5, cifar_resnet20 expects") == 1
    assert "state_dict_mismatch" in result.output and len(result.output) < 600, result.output
    assert _submission_count(live) == 0


def test_swapped_files_are_refused_before_uploading(cli: typer.Typer, live: Live, tmp_path: Path):
    weights, manifest_path = model_files(tmp_path)
    result = run(cli, "submit", "--weights", str(manifest_path), "--manifest", str(weights),
                 "--server", live.url, "--token", live.alice)  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "the files look swapped: pass the .safetensors file as --weights" in result.output
    assert "uploading" not in result.output  # refused before the upload began
    assert _submission_count(live) == 0


def _submission_count(live: Live) -> int:
    from sqlalchemy import func, select

    from models.db.engine import session_scope
    from models.db.entities import Submission

    with session_scope(live.settings) as session:
        return session.scalar(select(func.count()).select_from(Submission))
