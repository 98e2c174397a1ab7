"""CSV formula injection (issue 35 §2): models named like spreadsheet formulas are uploaded
through REST (202), finished by the real pipeline functions, and exported as CSV by REST and by
``certbench export``; every text cell that begins with ``=``, ``+``, ``-``, ``@``, tab or
carriage return is prefixed with a single quote (OWASP), every figure stays a number (negative
differences included), and the CSV reads back to the names as uploaded."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import httpx
import pytest
import typer
from typer.testing import CliRunner

from certbench.cli import client as client_commands
from certbench.figures import Column, read_csv, safe_csv
from certbench.figures.spreadsheet import FORMULA_STARTS, is_number
from tests.support.client import Live
from tests.support.service_factories import manifest, multipart, weights_bytes

PAYLOADS = ('=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", "@SUM(1+1)*cmd", "-2+3")
"""The four names the attack campaign had accepted and exported verbatim."""


def formula_cells(text: str) -> list[str]:
    """Cells a spreadsheet would evaluate: they begin like a formula and are no number."""
    rows = csv.reader(io.StringIO(text, newline=""))
    return [c for row in rows for c in row if c.startswith(FORMULA_STARTS) and not is_number(c)]


@pytest.fixture
def formula_entries(live: Live) -> list[int]:
    """The four payloads as finished entries of the tiny benchmark, worst first."""
    ids = []
    headers = {"Authorization": f"Bearer {live.alice}"}
    with httpx.Client(base_url=live.url, headers=headers, timeout=60) as http:
        for seed, name in enumerate(PAYLOADS):
            upload = multipart(weights_bytes(seed), manifest(name=name))
            sent = http.post("/api/v1/submissions", **upload)
            assert sent.status_code == 202, sent.text
            ids.append(sent.json()["id"])
            live.finish(ids[-1], quality=0.2 * (seed + 1))  # within the concurrency quota
    return ids


def test_rest_csv_exports_neutralise_formulas_and_keep_numbers(
    live: Live, formula_entries: list[int]
):
    with httpx.Client(base_url=live.url, timeout=60) as http:
        board = http.get("/api/v1/leaderboards/tiny/export", params={"format": "csv"})
        paired = http.get(
            "/api/v1/leaderboards/tiny/compare/export",
            params={"format": "csv", "table": "paired", "ids": formula_entries[::3]},
        )
    assert board.status_code == 200 and paired.status_code == 200, paired.text
    assert formula_cells(board.text) == [] and formula_cells(paired.text) == []
    rows = list(csv.DictReader(io.StringIO(board.text)))
    assert sorted(r["model"] for r in rows) == sorted("'" + name for name in PAYLOADS)
    assert all(math.isfinite(float(r["macr"])) for r in rows)  # figures are plain numbers
    back = read_csv(board.text, [Column(k, k, "text") for k in rows[0]])
    assert sorted(r["model"] for r in back) == sorted(PAYLOADS)
    tests = list(csv.DictReader(io.StringIO(paired.text)))
    assert {t["a"] for t in tests} == {f"'{PAYLOADS[0]} (#{formula_entries[0]})"}
    negative = [t["difference"] for t in tests if t["difference"].startswith("-")]
    assert negative and all(float(d) < 0 for d in negative)  # A is worse: numbers, unquoted


def test_certbench_export_writes_no_formula(live: Live, formula_entries: list[int], tmp_path: Path):
    app = typer.Typer()
    app.callback()(lambda: None)
    client_commands.register(app)
    out = tmp_path / "board.csv"
    runner = CliRunner()
    wrote = runner.invoke(
        app, ["export", "tiny", "--server", live.url, "--format", "csv", "--out", str(out)]
    )
    assert wrote.exit_code == 0, wrote.output
    ids = ["--id", str(formula_entries[0]), "--id", str(formula_entries[3])]
    printed = runner.invoke(
        app, ["export", "tiny", "--server", live.url, "--format", "csv", *ids, "--table", "paired"]
    )
    assert printed.exit_code == 0, printed.output
    for text in (out.read_text(encoding="utf-8"), printed.stdout):
        assert formula_cells(text) == [] and "'-2+3" in text


def test_csv_from_a_server_that_wrote_formulas_is_neutralised_by_the_cli():
    """What ``certbench export`` does to CSV from a server predating the rule: text cells that
    begin like a formula are prefixed, numbers (negative ones too) and safe cells are kept, a
    carriage return inside a cell stays inside it (no new row starting with a formula), and CSV
    already written safely is left byte for byte."""
    raw = (
        "model,difference,note\n"
        + "".join(f'"{name.replace(chr(34), chr(34) * 2)}",-0.5,\tx\n' for name in PAYLOADS)
        + '=1+1,1e-05,"\r"\n'
    )
    safe = safe_csv(raw)
    assert formula_cells(safe) == []
    rows = list(csv.reader(io.StringIO(safe, newline="")))
    assert [r[0] for r in rows[1:5]] == ["'" + name for name in PAYLOADS]
    assert {r[1] for r in rows[1:]} == {"-0.5", "1e-05"} and rows[1][2] == "'\tx"
    assert rows[5] == ["'=1+1", "1e-05", "'\r"]
    smuggled = safe_csv('"x\r=HYPERLINK(""http://x"")",1\n')
    assert list(csv.reader(io.StringIO(smuggled, newline=""))) == [
        ['x\r=HYPERLINK("http://x")', "1"]
    ]
    assert safe_csv(safe) == safe
