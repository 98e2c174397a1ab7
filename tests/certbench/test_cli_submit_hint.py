"""A benchmark_mismatch refusal of ``certbench submit`` says what the manifest names and what to
pass (issue 25 §3: the refusal gave no hint). The server is a stand-in that refuses as the real
intake does (``tests/api/test_api_submissions.py`` covers the server's side)."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path

from typer.testing import CliRunner

import certbench.cli.client as client_commands
from certbench.cli.app import app
from certbench.client import ClientError

runner = CliRunner()
client_commands.register(app)


class Refusing:
    """A Client that accepts the token (``submit`` checks it first, with ``me``) and whose
    submit is refused with ``code``."""

    def __init__(self, code: str) -> None:
        self.code = code

    def me(self) -> None:
        return None

    def submit(self, *args: object, **kwargs: object) -> None:
        raise ClientError(
            "manifest.benchmark: benchmark 'digits' does not exist; did you mean 'demo-digits'?",
            status=422,
            code=self.code,
        )


def _submit(monkeypatch, tmp_path: Path, code: str):
    weights, manifest = tmp_path / "model.safetensors", tmp_path / "manifest.json"
    weights.write_bytes(b"weights")
    manifest.write_text(json.dumps({"benchmark": "digits"}), encoding="utf-8")
    monkeypatch.setattr(client_commands, "connect", lambda *a, **k: nullcontext(Refusing(code)))
    argv = ["submit", "--weights", str(weights), "--manifest", str(manifest), "--token", "t"]
    return runner.invoke(app, argv)


def test_benchmark_mismatch_names_the_manifests_benchmark_and_the_fix(monkeypatch, tmp_path):
    result = _submit(monkeypatch, tmp_path, "benchmark_mismatch")
    assert result.exit_code == 2
    assert "names benchmark 'digits'" in result.output
    assert '"demo-digits"' in result.output and "--benchmark NAME" in result.output


def test_other_refusals_carry_no_benchmark_hint(monkeypatch, tmp_path):
    result = _submit(monkeypatch, tmp_path, "bad_manifest")
    assert result.exit_code == 2 and "Fix:" not in result.output
