"""Paper-ready exports (issue 25 §5): the leaderboard and compare pages as LaTeX (booktabs) and
CSV tables with 95 % intervals and "tied" marks, BibTeX of the entries' and the benchmark's
papers, from REST, from the pages' links and from ``certbench export``.

The LaTeX is compiled by ``pdflatex`` (Debian's ``texlive-latex-base``; booktabs' three rules
fall back to ``\\hline`` where ``texlive-latex-recommended`` is missing) and the CSV is read back
to the numbers the JSON leaderboard serves.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.web.leaderboard_view import metric_columns
from certbench.figures import Cell, Column, Table, read_csv, to_csv, to_latex
from tests.support import timing
from tests.support.web import Site

DOCUMENT = r"""\documentclass{article}
\usepackage[utf8]{inputenc}
\usepackage[T1]{fontenc}
\usepackage{graphicx}
\IfFileExists{booktabs.sty}{\usepackage{booktabs}}{%
  \newcommand\toprule{\hline}\newcommand\midrule{\hline}\newcommand\bottomrule{\hline}}
\begin{document}
BODY
\end{document}
"""


@pytest.fixture
def anonymous(client: TestClient) -> TestClient:
    client.cookies.clear()
    return client


def compile_latex(body: str, folder: Path) -> None:
    """Compile ``body`` in a minimal article with pdflatex; fails with the log on any error."""
    pdflatex = shutil.which("pdflatex")
    if pdflatex is None:
        pytest.fail(
            "pdflatex is needed to check that the LaTeX exports compile: run "
            "`apt-get install -y texlive-latex-base` (Debian)",
            pytrace=False,
        )
    source = folder / "table.tex"
    source.write_text(DOCUMENT.replace("BODY", body), encoding="utf-8")
    run = subprocess.run(
        [pdflatex, "-interaction=nonstopmode", "-halt-on-error", source.name],
        cwd=folder, capture_output=True, text=True, timeout=timing.seconds(120), check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:]
    assert (folder / "table.pdf").stat().st_size > 1000
    assert "Overfull" not in run.stdout or "resizebox" in body


def test_the_leaderboard_exports_compile_and_round_trip(
    anonymous: TestClient, site: Site, tmp_path: Path
) -> None:
    url = "/api/v1/leaderboards/webclean/export"
    latex = anonymous.get(url, params={"format": "latex", "sort": "macr"})
    assert latex.status_code == 200 and latex.headers["content-type"].startswith(
        "application/x-tex"
    )
    assert "attachment" in latex.headers["content-disposition"]
    text = latex.text
    assert r"\toprule" in text and r"\midrule" in text and r"\bottomrule" in text
    assert r"\ensuremath{\ell}\ensuremath{\infty}" in text  # ℓ∞ as math, never "$$"
    assert "$$" not in text
    compile_latex(text, tmp_path)

    board = anonymous.get("/api/v1/leaderboards/webclean", params={"sort": "macr"}).json()
    bench = anonymous.get("/api/v1/benchmarks/webclean").json()
    csv_text = anonymous.get(url, params={"format": "csv", "sort": "macr"}).text
    from api.schemas.benchmark import BenchmarkPublic

    keys = [c.key for c in metric_columns(BenchmarkPublic.model_validate(bench))]
    header = csv_text.splitlines()[0].split(",")
    assert header[:5] == ["rank", "model", "submission_id", "sigma", "architecture"]
    assert header[5:8] == [keys[0], f"{keys[0]}_low", f"{keys[0]}_high"]
    columns = [Column(h, h, "text") for h in header[:5]]
    columns += [Column(k, k) for k in keys] + [Column("tied_with", "tied", "text")]
    rows = read_csv(csv_text, columns)
    assert [r["model"] for r in rows] == [r["model_name"] for r in board["rows"]]
    for row, served in zip(rows, board["rows"], strict=True):
        assert row["tied_with"] == (f"#{served['tied_with']}" if served["tied_with"] else "")
        for key in keys:
            cell = row[key]
            value = served["metrics"][key]
            assert (cell.value is None) == (value is None)
            if value is not None:
                assert cell.value == value  # unrounded
            interval = served["metrics"]["intervals"].get(key)
            if interval and interval["ci_low"] is not None:
                assert (cell.low, cell.high) == (interval["ci_low"], interval["ci_high"])
    assert any(r["tied_with"] for r in rows)  # the seeded board has ties: they are marked

    bib = anonymous.get(url, params={"format": "bibtex"}).text
    assert "@inproceedings{cohen2019certified," in bib and "sun2025average" in bib
    assert "muthukumar2025disentangling" in bib  # webclean runs the PD robustness stage
    assert bib.count("@misc{certbench") == len(board["rows"])
    assert "url = {https://example.org/" in bib
    assert bib.count("{") == bib.count("}")


def test_the_compare_exports_hold_both_tables(
    anonymous: TestClient, site: Site, tmp_path: Path
) -> None:
    ids = site.seeded.entries["webbands"]
    params = {"ids": [ids["Alpha"], ids["Echo"]]}
    url = "/api/v1/leaderboards/webbands/compare/export"
    text = anonymous.get(url, params={**params, "format": "latex"}).text
    assert (text.count(r"\begin{table}") == 2 and "tied" in text) or "differ" in text
    assert "cert_acc_000" not in text and "macr" not in text  # labels users see, not keys
    compile_latex(text, tmp_path)
    paired = anonymous.get(url, params={**params, "format": "csv", "table": "paired"}).text
    served = anonymous.get("/api/v1/leaderboards/webbands/compare", params=params).json()
    assert len(paired.splitlines()) == 1 + sum(len(p["tests"]) for p in served["pairs"])
    assert anonymous.get(url, params={**params, "format": "nope"}).status_code == 422


def test_the_pages_link_to_their_exports(anonymous: TestClient, site: Site) -> None:
    page = anonymous.get("/leaderboards/webclean").text
    exports = page[page.index('id="exports"') :].split("</p>")[0]
    for fmt in ("latex", "csv", "bibtex"):
        assert f"/api/v1/leaderboards/webclean/export?format={fmt}&amp;sort=macr" in exports
    ids = site.seeded.entries["webbands"]
    compare = anonymous.get(f"/compare?id={ids['Alpha']}&id={ids['Echo']}").text
    assert f"compare/export?format=latex&amp;ids={ids['Alpha']}&amp;ids={ids['Echo']}" in compare
    assert (
        f'href="/compare/figures/compare-pa.pdf?id={ids["Alpha"]}&amp;id={ids["Echo"]}"' in compare
    )


def test_figures_download_as_svg_png_and_pdf(anonymous: TestClient, site: Site) -> None:
    sid = site.seeded.entries["webbands"]["Bravo"]
    svg = anonymous.get(f"/models/{sid}/figures/pa-ecdf.svg")
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    assert (
        "p_A distribution" in svg.text
        and "default-src 'none'" in svg.headers["content-security-policy"]
    )
    assert anonymous.get(f"/models/{sid}/figures/pa-ecdf.png").content[:8] == b"\x89PNG\r\n\x1a\n"
    assert anonymous.get(f"/models/{sid}/figures/cert-acc.pdf").content[:5] == b"%PDF-"
    missing = anonymous.get(f"/models/{sid}/figures/nope.svg")
    assert missing.status_code == 404 and "pa-ecdf" in missing.text


def test_tables_escape_text_and_keep_numbers(tmp_path: Path) -> None:
    columns = [Column("model", "Model & σ", "text"), Column("acc", "ℓ∞ ∩ PD 8/255", "percent")]
    rows = [
        {"model": "A_b #1 50% {x} ~ ^ \\ Müller", "acc": Cell(0.123456789, 0.1, 0.2)},
        {"model": "none", "acc": Cell(None)},
    ]
    table = Table("caption with p̂_A ≥ x", "tab:x", columns, rows, notes=["σ = 0.25"])
    compile_latex(to_latex(table), tmp_path)
    back = read_csv(to_csv(table), columns)
    assert back[0]["model"] == rows[0]["model"] and back[0]["acc"] == rows[0]["acc"]
    assert back[1]["acc"] == Cell(None) and math.isclose(back[0]["acc"].value, 0.123456789)
    assert re.search(r"12\.3\\,\{\\scriptsize\[10\.0, 20\.0\]\}", to_latex(table))


@pytest.mark.slow
def test_certbench_export_writes_what_rest_serves(
    anonymous: TestClient, server: str, site: Site, tmp_path: Path
) -> None:
    import sys

    out = tmp_path / "refs.bib"
    certbench = str(Path(sys.executable).with_name("certbench"))
    cli = [certbench, "export", "webclean", "--server", server]
    run = subprocess.run(
        [*cli, "--format", "bibtex", "--out", str(out)], capture_output=True, text=True,
        timeout=timing.seconds(300), check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    served = anonymous.get("/api/v1/leaderboards/webclean/export", params={"format": "bibtex"})
    assert out.read_text() == served.text
    ids = site.seeded.entries["webbands"]
    paired = subprocess.run(
        [*cli[:2], "webbands", "--server", server, "--id", str(ids["Alpha"]), "--id",
         str(ids["Echo"]), "--format", "csv", "--table", "paired"],
        capture_output=True, text=True, timeout=timing.seconds(300), check=False,
    )  # fmt: skip
    assert paired.returncode == 0, paired.stderr
    assert paired.stdout.splitlines()[0].startswith("a,b,figure,estimate_a")
    bad = subprocess.run([*cli, "--format", "docx"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "latex, csv or bibtex" in bad.stderr
