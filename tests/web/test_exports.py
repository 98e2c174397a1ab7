"""Paper-ready exports (issue 25 §5, issue 34 §2): the leaderboard and compare pages as LaTeX
(booktabs) and CSV tables with 95 % intervals and "tied" marks, BibTeX of the entries' and the
benchmark's papers, from REST, from the pages' links and from ``certbench export``.

The LaTeX is compiled by ``pdflatex`` in a two-column 10 pt paper (ICML's 6.75 in text width)
with exactly the packages the export's first line names (``scripts/test`` installs Debian's
``texlive-latex-recommended`` for booktabs): no overfull box, and every figure on the rendered
page (``pdftoppm``, ``pdftotext -bbox``: poppler-utils) at least as tall as 8 pt text
(``\\footnotesize`` in the same paper). The CSV is read back to the numbers the JSON
leaderboard serves.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.web.leaderboard_view import metric_columns
from certbench.figures import Cell, Column, Table, read_csv, to_csv, to_latex
from tests.support import timing
from tests.support.latex import compile_latex, figure_sizes, packages
from tests.support.web import REPO, Site

SCREENSHOTS = REPO / "test-artifacts" / "screenshots"


@pytest.fixture
def anonymous(client: TestClient) -> TestClient:
    client.cookies.clear()
    return client


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
    assert "resizebox" not in text and packages(text) == ["booktabs", "array"]
    # the papers' layout: model, σ, certified accuracy at each radius under one header, ACR
    header = next(line for line in text.splitlines() if line.startswith("Model & "))
    assert header == r"Model & \ensuremath{\sigma} & 0 & 0.25 & 0.5 & 0.75 & 1.0 & ACR \\"
    assert r"\multicolumn{5}{c}{Certified accuracy at \ensuremath{\ell}" in text
    assert r"\cmidrule(lr){3-7}" in text and "Architecture" not in text
    assert_readable(compile_latex(text, tmp_path))
    # columns by key or the page's label, any case and spacing, in the order asked
    picked = anonymous.get(url, params={"format": "latex", "columns": "ℓ∞ ∩ pd 8/255, MODEL,acr"})
    assert picked.status_code == 200, picked.text
    header = next(line for line in picked.text.splitlines() if line.endswith("ACR \\\\"))
    assert header.startswith(r"\ensuremath{\ell}\ensuremath{\infty}\ensuremath{\cap}PD 8/255")
    assert header.count("&") == 2 and "$$" not in picked.text  # ℓ∞ as math, never "$$"
    wrong = anonymous.get(url, params={"format": "csv", "columns": ["model", "accuracy"]})
    assert wrong.status_code == 422 and wrong.json()["code"] == "invalid_columns"
    assert "'accuracy'" in wrong.json()["message"] and "macr (ACR)" in wrong.json()["message"]

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
    assert text.count(r"\end{table") == 2 and ("tied" in text or "differ" in text)
    assert "cert_acc_000" not in text and "macr" not in text  # labels users see, not keys
    assert_readable(compile_latex(text, tmp_path))
    paired = anonymous.get(url, params={**params, "format": "csv", "table": "paired"}).text
    served = anonymous.get("/api/v1/leaderboards/webbands/compare", params=params).json()
    assert len(paired.splitlines()) == 1 + sum(len(p["tests"]) for p in served["pairs"])
    assert anonymous.get(url, params={**params, "format": "nope"}).status_code == 422


def test_the_pages_link_to_their_exports(anonymous: TestClient, site: Site) -> None:
    page = anonymous.get("/leaderboards/webclean").text
    exports = page[page.index('id="exports"') :].split("</p>")[0]
    for fmt in ("latex", "csv", "bibtex"):
        assert f"/api/v1/leaderboards/webclean/export?format={fmt}&amp;sort=macr" in exports
    # the column picker: a form to the same export, the papers' layout ticked (issue 34 §2)
    picker = page[page.index('id="export-columns"') :].split("</form>")[0]
    assert 'action="/api/v1/leaderboards/webclean/export"' in picker
    boxes = re.findall(r'name="columns" value="([^"]+)"( checked)?', picker)
    ticked = [key for key, checked in boxes if checked]
    assert ticked == ["model", "sigma", *(k for k, _ in boxes if k.startswith("cert_acc_")), "macr"]
    assert {"rank", "architecture", "tied_with", "pa_median"} <= {k for k, _ in boxes}
    hidden = dict(re.findall(r'type="hidden" name="(\w+)" value="([^"]*)"', picker))
    submitted = anonymous.get(
        "/api/v1/leaderboards/webclean/export",
        params={**hidden, "columns": ticked, "format": "latex"},
    )
    default = anonymous.get("/api/v1/leaderboards/webclean/export", params={**hidden})
    assert submitted.status_code == 200 and submitted.text == default.text
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
    assert r"\cbci{12.3}{10.0--20.0}" in to_latex(table)  # the interval under its figure


def assert_readable(pdf: Path) -> None:
    """Every figure of the compiled export is set at 8 pt or more (the reference's height,
    less a pixel row's rounding at 300 dpi)."""
    figures = figure_sizes(pdf)
    assert figures, "no figure found on the compiled page"
    small = [f for f in figures if f.relative < 0.96]
    assert not small, f"figures under 8 pt: {small[:5]}"


def _paper_table(entries: int, extra: int = 0) -> Table:
    """The papers' layout with ``entries`` rows of long names, and ``extra`` more columns."""
    group = "Certified accuracy at ℓ₂ radius"
    radii = [("000", "0"), ("025", "0.25"), ("050", "0.5"), ("075", "0.75"), ("100", "1.0")]
    columns = [Column("model", "Model", "text"), Column("sigma", "σ", "text")]
    columns += [Column(f"cert_acc_{k}", h, "percent", group=group) for k, h in radii]
    columns += [Column("macr", "ACR", "radius")]
    columns += [Column(f"x{i}", f"extra figure {i}", "percent") for i in range(extra)]
    rows: list[Mapping[str, Cell | str | None]] = []
    for i in range(entries):
        row: dict[str, Cell | str | None] = {
            "model": f"LeNet-5, Gaussian augmentation with consistency regularisation #{i}",
            "sigma": "0.25",
        }
        for j, c in enumerate(columns[2:]):
            value = (0.9 - 0.1 * j) if c.kind == "percent" else 0.4
            row[c.key] = Cell(value, value - 0.05, value + 0.04)
        rows.append(row)
    return Table("Paper layout", "tab:paper", columns, rows, notes=["Intervals under figures."])


def test_the_paper_layout_is_readable_in_a_two_column_paper(tmp_path: Path) -> None:
    """Issue 34 §2: the default table compiles with its named packages, spans what it needs
    (both columns with intervals, one without) and sets every figure at 8 pt or more; a
    shrunk table (the old ``\\resizebox``) is caught by the same measurement."""
    table = _paper_table(6)
    latex = to_latex(table)
    assert r"\begin{table*}" in latex and "resizebox" not in latex
    pdf = compile_latex(latex, tmp_path / "both")
    assert_readable(pdf)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)  # the rendered pages, to look at
    for png in sorted(pdf.parent.glob("table-*.png")):
        shutil.copyfile(png, SCREENSHOTS / f"latex-paper-{png.name}")
    narrow = to_latex(table, intervals=False)
    assert r"\begin{table}" in narrow and "cbci" not in narrow
    assert_readable(compile_latex(narrow, tmp_path / "one"))

    shrunk = narrow.replace(r"\begin{tabular}", r"\resizebox{0.4\linewidth}{!}{\begin{tabular}", 1)
    head, tail = shrunk.rsplit(r"\end{tabular}", 1)
    shrunk = head + r"\end{tabular}}" + tail
    pdf = compile_latex("% Needs \\usepackage{graphicx}.\n" + shrunk, tmp_path / "shrunk")
    with pytest.raises(AssertionError, match="under 8 pt"):
        assert_readable(pdf)


def test_a_selection_too_wide_for_a_page_says_so() -> None:
    latex = to_latex(_paper_table(2, extra=8))
    assert r"\begin{table*}" in latex and "choose fewer columns" in latex


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
