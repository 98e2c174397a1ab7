"""The model page's reproduction commands run as shown (issue 34 §8: the page's hint
``certify … --seed 0x…`` left out ``--skip`` and ``--n``, and the docs' ``--config clean`` was
refused). A demo-digits entry (the demo's generated data at a cheaper protocol) is certified by
the real tasks; the test copies the commands from the page's HTML and runs each line in a fresh
interpreter, in an empty folder holding only the submitted files, as a user would; the records
equal the stored ones bit for bit (every column but the wall-clock seconds), and so do those of
the docs' spelling, ``--config clean`` (the service's name of the demo's one test set)."""

from __future__ import annotations

import html
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import torch
from fastapi.testclient import TestClient

from api.main import create_app
from certbench.nets.architectures import build_classifier
from models.db.entities import Submission
from models.db.states import SubmissionState
from models.submissions import storage
from tests.support import timing
from tests.support.workers import create_submission, load_benchmark, weights_bytes
from workers.app import app
from workers.names import VALIDATE

DEMO = Path(__file__).resolve().parents[2] / "models" / "catalog" / "definitions"
CLI = "import sys; from certbench.cli.app import main; sys.argv[0] = 'certbench'; main()"


def _definition() -> dict[str, object]:
    """demo-digits with a cheaper protocol (every 32nd test image, n0 = 8, n = 48) and only
    the certification stage."""
    definition = json.loads((DEMO / "demo-digits.json").read_text(encoding="utf-8"))
    definition.update(name="demo-mini", title="Demo digits, mini protocol")
    definition["protocol"] = {**definition["protocol"], "n0": 8, "n": 48, "skip": 32}
    definition.pop("stages", None)
    return definition


def _manifest() -> dict[str, object]:
    return {
        "benchmark": "demo-mini",
        "architecture": {"name": "lenet5", "kwargs": {}},
        "num_classes": 10,
        "preprocessing": {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]},
        "smoothing": {"sigma": 0.5},
        "metadata": {"name": "LeNet-5, random weights", "authors": ["certbench tests"]},
    }


def test_the_model_pages_commands_reproduce_the_records(settings, session, worker, tmp_path):
    load_benchmark(session, _definition())
    torch.manual_seed(3)
    model = build_classifier("lenet5", num_classes=10, mean=[0.5] * 3, std=[0.5] * 3)
    weights = weights_bytes(model, tmp_path / "upload")
    sid = create_submission(
        session, settings, weights=weights, manifest_doc=_manifest(), benchmark="demo-mini"
    )
    app.send_task(VALIDATE, args=[sid])
    worker.run_all()
    session.expire_all()
    assert session.get(Submission, sid).state == SubmissionState.FINISHED

    with TestClient(create_app(settings)) as client:
        page = client.get(f"/models/{sid}")
    assert page.status_code == 200
    shown = re.search(r'<code id="reproduce-command">(.*?)</code>', page.text, re.S)
    assert shown is not None, "the model page shows no reproduction commands"
    lines = html.unescape(shown.group(1)).splitlines()
    commands = [line for line in lines if line and not line.startswith("#")]
    assert commands[0] == "uv run certbench datasets demo --out demo-digits"
    certify = shlex.split(commands[1])
    for option, value in (("--skip", "32"), ("--n0", "8"), ("--n", "48"), ("--alpha", "0.001")):
        assert certify[certify.index(option) + 1] == value, option
    assert "--config" not in certify  # the demo's one test set is its folder's only config
    assert certify[certify.index("--dataset") + 1] == "./demo-digits"

    work = tmp_path / "work"
    work.mkdir()
    (work / "model.safetensors").write_bytes(weights)  # the names the page gives them
    (work / "manifest.json").write_text(json.dumps(_manifest()), encoding="utf-8")
    # the docs' spelling of the same run: the service's name of the test set as --config
    docs = commands[1].replace("--dataset ./demo-digits", "--dataset ./demo-digits --config clean")
    for command in [*commands, docs.replace("--out clean.parquet", "--out docs.parquet")]:
        argv = shlex.split(command)
        assert argv[:3] == ["uv", "run", "certbench"], command
        run = subprocess.run(
            [sys.executable, "-c", CLI, *argv[3:]], cwd=work, capture_output=True, text=True,
            timeout=timing.seconds(300), check=False,
        )  # fmt: skip
        assert run.returncode == 0, f"{command}\n{run.stderr[-3000:]}"

    stored = storage.resolve(settings.artifacts_dir, storage.test_set_records_relpath(sid, "clean"))
    mine, theirs = pq.read_table(work / "clean.parquet"), pq.read_table(stored)
    columns = [c for c in theirs.column_names if c != "seconds"]
    assert theirs.num_rows == 12  # 364 test images, every 32nd
    assert mine.select(columns).equals(theirs.select(columns))
    assert pq.read_table(work / "docs.parquet").select(columns).equals(theirs.select(columns))
