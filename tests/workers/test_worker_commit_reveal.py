"""Commit-reveal of the run seed (issue 11 §1), end to end through the real tasks and the app.

Between every two task messages of a run the secret seed must be nowhere a submitter can read
it: REST (status, results, records), the web status and model pages, the files on disk, the
task messages and the logs. Once the run ends it is revealed, matches its commitment, and
``certbench certify --seed`` with it reproduces the stored records bit for bit.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from api.main import create_app
from api.web.auth import COOKIE_NAME
from certbench.cli.app import app as cli
from certbench.smoothing.records import read_table
from models.core.settings import Settings
from models.db.accounts import create_token
from models.db.entities import RunSeed, Submission, User
from models.db.states import SubmissionState
from models.stages.work import get_work_item
from models.submissions import lifecycle as pipeline
from models.submissions import run_seeds, storage
from tests.support.stages import model_files, records_files, seed_forms
from tests.support.workers import (
    SKIP,
    TEST_SETS,
    create_submission,
    manifest,
    revealed_seed,
    tiny_model,
    weights_bytes,
)
from workers.app import app
from workers.names import VALIDATE

S = SubmissionState
MODEL_SEED = 5


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=True) as value:
        yield value


def _submit(session: Session, settings: Settings, tmp_path: Path) -> tuple[int, str]:
    """A queued submission of alice's and her API token."""
    weights = weights_bytes(tiny_model(seed=MODEL_SEED), tmp_path / "upload")
    sid = create_submission(session, settings, weights=weights, manifest_doc=manifest())
    alice = session.scalar(select(User).where(User.name == "alice"))
    app.send_task(VALIDATE, args=[sid])
    return sid, create_token(session, user=alice).secret


def _readable(client: TestClient, settings: Settings, sid: int, token: str) -> str:
    """Everything a submitter (or anyone with disk access to the records) can read."""
    bearer = {"Authorization": f"Bearer {token}"}
    client.cookies.set(COOKIE_NAME, token)
    texts = [
        client.get(f"/api/v1/submissions/{sid}", headers=bearer).text,
        client.get(f"/api/v1/submissions/{sid}/progress", headers=bearer).text,
        client.get(f"/api/v1/results/{sid}", headers=bearer).text,
        client.get(f"/submissions/{sid}").text,
        client.get(f"/models/{sid}").text,
    ]
    for name in TEST_SETS:
        response = client.get(f"/api/v1/results/{sid}/records/{name}", headers=bearer)
        texts.append(response.content.decode("latin-1"))
    texts += [p.read_bytes().decode("latin-1") for p in records_files(settings, sid)]
    return "\n".join(texts)


def test_the_seed_is_committed_and_stays_secret_until_the_run_ends(
    settings, session, benchmark, worker, tmp_path, client, caplog, capfd
):
    caplog.set_level(logging.DEBUG)
    sid, token = _submit(session, settings, tmp_path)
    row = session.get(RunSeed, sid)
    secret = row.seed
    assert row.kind == "secret" and row.commitment == hashlib.sha256(secret.encode()).hexdigest()
    assert len(secret) == 2 + 32 and int(secret, 16).bit_length() > 64  # 128-bit; p(fail) 2^-64
    assert secret not in repr(get_work_item(session, sid, settings=settings))

    steps, forms = 0, seed_forms(secret)
    while (message := worker.take()) is not None:
        assert all(isinstance(a, int | str) and str(a) not in forms for a in message.args)
        worker.execute(message)
        steps += 1
        session.expire_all()
        if session.get(Submission, sid).state != S.FINISHED:
            readable = _readable(client, settings, sid, token)
            assert row.commitment in readable  # shown from the start ...
            assert not [f for f in seed_forms(secret) if f in readable], f"leak after {message}"
    assert steps >= 6  # validate, 4 shards, aggregate: checked between every two
    logs = caplog.text + "".join(capfd.readouterr())
    assert not [f for f in seed_forms(secret) if f in logs]

    # ... and the seed itself once the run has finished: REST, web, merged records.
    assert session.get(Submission, sid).state == S.FINISHED
    bearer = {"Authorization": f"Bearer {token}"}
    shown = client.get(f"/api/v1/submissions/{sid}", headers=bearer).json()["seed"]
    assert shown == {**shown, "kind": "secret", "revealed": True, "value": secret,
                     "commitment": row.commitment}  # fmt: skip
    assert client.get(f"/api/v1/results/{sid}").json()["seed"]["value"] == secret
    assert secret in client.get(f"/models/{sid}").text
    client.cookies.set(COOKIE_NAME, token)
    assert secret in client.get(f"/submissions/{sid}").text
    for name in TEST_SETS:
        path = storage.resolve(settings.artifacts_dir, storage.test_set_records_relpath(sid, name))
        metadata = read_table(path).schema.metadata[b"certbench"].decode()
        assert secret in metadata and row.commitment in metadata


def test_results_and_records_are_withheld_while_a_run_is_not_over(
    settings, session, benchmark, worker, tmp_path, client
):
    """Results are stored just before the state moves to finished: a reader in between sees
    neither figures, stage seeds nor records."""
    sid, _ = _submit(session, settings, tmp_path)
    worker.run_all()
    secret = session.get(RunSeed, sid).seed
    session.execute(update(Submission).where(Submission.id == sid).values(state=S.RUNNING))
    session.commit()
    body = client.get(f"/api/v1/results/{sid}").json()
    assert body["results"] == [] and body["stages"] == [] and body["summary"] is None
    assert body["seed"]["value"] is None
    response = client.get(f"/api/v1/results/{sid}/records/{TEST_SETS[0]}")
    assert response.status_code == 404 and "once the run has ended" in response.text
    assert secret not in client.get(f"/models/{sid}").text


@pytest.mark.parametrize("end", [S.CANCELLED, S.FAILED])
def test_a_cancelled_or_failed_run_reveals_its_seed(
    settings, session, benchmark, worker, tmp_path, client, end
):
    sid, token = _submit(session, settings, tmp_path)
    worker.run_next()  # validated, shards queued
    bearer = {"Authorization": f"Bearer {token}"}
    assert client.get(f"/api/v1/submissions/{sid}", headers=bearer).json()["seed"]["value"] is None
    if end == S.CANCELLED:
        assert client.post(f"/api/v1/submissions/{sid}/cancel", headers=bearer).status_code == 200
    else:
        assert pipeline.fail(session, sid, reason="worker_error", message="test")
    seed = client.get(f"/api/v1/submissions/{sid}", headers=bearer).json()["seed"]
    assert seed["revealed"] and seed["value"] == session.get(RunSeed, sid).seed


def test_a_fresh_rerun_draws_a_new_seed_and_a_resume_keeps_it(
    settings, session, benchmark, worker, tmp_path
):
    sid, _ = _submit(session, settings, tmp_path)
    worker.run_all()
    first = session.get(RunSeed, sid).seed
    assert pipeline.reset_for_rerun(session, sid, fresh=False, settings=settings)
    session.expire_all()
    assert session.get(RunSeed, sid).seed == first  # recorded shards keep their seed
    app.send_task(VALIDATE, args=[sid])
    worker.run_all()
    assert revealed_seed(session, sid) == int(first, 16)
    assert pipeline.reset_for_rerun(session, sid, fresh=True, settings=settings)
    session.expire_all()
    second = session.get(RunSeed, sid)
    assert second.seed != first and second.commitment == run_seeds.commitment(second.seed)
    assert run_seeds.view(session, session.get(Submission, sid)).value is None  # secret again


def test_the_revealed_seed_reproduces_the_records_with_the_cli(
    settings, session, benchmark, worker, tmp_path, dataset
):
    """`certbench certify --seed <revealed>` gives the stored records bit for bit (every
    column but the wall-clock seconds)."""
    sid, _ = _submit(session, settings, tmp_path)
    worker.run_all()
    assert session.get(Submission, sid).state == S.FINISHED
    seed = run_seeds.view(session, session.get(Submission, sid)).value
    weights, manifest_path = model_files(tmp_path / "cli", MODEL_SEED)
    for name in TEST_SETS:
        out = tmp_path / f"{name}.parquet"
        result = CliRunner().invoke(cli, [
            "certify", "--weights", str(weights), "--manifest", str(manifest_path),
            "--dataset", str(dataset), "--config", name, "--skip", str(SKIP), "--n0", "4",
            "--n", "16", "--alpha", "0.001", "--device", "cpu", "--seed", seed, "--out", str(out),
        ])  # fmt: skip
        assert result.exit_code == 0, result.output
        relpath = storage.test_set_records_relpath(sid, name)
        stored = storage.resolve(settings.artifacts_dir, relpath)
        mine, theirs = pq.read_table(out), pq.read_table(stored)
        columns = [c for c in theirs.column_names if c != "seconds"]
        assert theirs.num_rows == 2
        assert mine.select(columns).equals(theirs.select(columns)), name
