"""Compile a LaTeX export as a paper would and measure its text on the rendered page (issue 34
§2: the old export's ``\\resizebox`` shrank 17 columns to about 3 pt).

:func:`compile_latex` puts the export in a two-column 10 pt article whose text is ICML's 6.75 in
(the narrowest common two-column text), with exactly the packages the export's first comment
line names, and fails on any LaTeX error or overfull box. :func:`figure_sizes` renders the PDF
with ``pdftoppm`` and finds every number (``84.4``, ``79.4–88.4``) with ``pdftotext -bbox``; a
figure's size is the ink height of its digits, compared with the digits of a reference line set
at ``\\footnotesize`` (8 pt) in the same document, so fonts and rasterisation cancel out.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from html import unescape
from pathlib import Path

import pytest

from tests.support import timing

REFERENCE = "12345.678"
"""The reference number, set at 8 pt in the body text."""
PAPER = r"""\documentclass[10pt,twocolumn]{article}
\usepackage[textwidth=487pt,columnsep=19pt]{geometry}
PACKAGES
\begin{document}
Reference figures at 8 pt: {\footnotesize REFERENCE}.

BODY
\end{document}
"""
NUMBER = re.compile(r"-?\d+\.\d+(–-?\d+\.\d+)?")
DPI = 300
DEBIAN = {"pdflatex": "texlive-latex-recommended", "pdftoppm": "poppler-utils",
          "pdftotext": "poppler-utils"}  # fmt: skip


def tool(name: str) -> str:
    """The path of ``name``, or a failure saying which Debian package has it."""
    found = shutil.which(name)
    if found is None:
        pytest.fail(
            f"{name} is needed to check the LaTeX exports: run `apt-get install -y "
            f"{DEBIAN[name]}` (Debian; scripts/test does it as root)",
            pytrace=False,
        )
    return found


def packages(latex: str) -> list[str]:
    """The packages the export says it needs (its ``% ... Needs \\usepackage{...}`` lines)."""
    needs = [line for line in latex.splitlines() if line.startswith("%") and "Needs" in line]
    return list(dict.fromkeys(re.findall(r"\\usepackage\{([\w-]+)\}", "\n".join(needs))))


def compile_latex(body: str, folder: Path) -> Path:
    """Compile ``body`` in the two-column paper with the packages it names; fail with the log
    on an error or an overfull box. Returns the PDF."""
    pdflatex = tool("pdflatex")
    preamble = "\n".join(rf"\usepackage{{{p}}}" for p in packages(body))
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "table.tex"
    text = PAPER.replace("PACKAGES", preamble).replace("REFERENCE", REFERENCE)
    source.write_text(text.replace("BODY", body), encoding="utf-8")
    run = subprocess.run(
        [pdflatex, "-interaction=nonstopmode", "-halt-on-error", source.name],
        cwd=folder, capture_output=True, text=True, timeout=timing.seconds(120), check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:]
    assert "Overfull" not in run.stdout, run.stdout[-3000:]
    pdf = folder / "table.pdf"
    assert pdf.stat().st_size > 1000
    return pdf


@dataclass(frozen=True)
class Figure:
    """A number on a rendered page and its size relative to the 8 pt reference."""

    page: int
    text: str
    relative: float


def figure_sizes(pdf: Path) -> list[Figure]:
    """Every number set in ``pdf`` but the reference, with the ink height of its digits over
    that of the 8 pt reference (1.0: 8 pt; 0.375: the 3 pt of a shrunk table)."""
    from PIL import Image

    stem = pdf.with_suffix("")
    subprocess.run(
        [tool("pdftoppm"), "-r", str(DPI), "-png", str(pdf), str(stem)],
        check=True, timeout=timing.seconds(120),
    )  # fmt: skip
    xml = subprocess.run(
        [tool("pdftotext"), "-bbox", str(pdf), "-"],
        capture_output=True, text=True, check=True, timeout=timing.seconds(60),
    ).stdout  # fmt: skip
    images = sorted(pdf.parent.glob(f"{stem.name}-*.png"), key=lambda p: int(p.stem.split("-")[-1]))
    found: list[tuple[int, str, float]] = []
    word = re.compile(r'xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)">([^<]*)<')
    for page, (chunk, image) in enumerate(zip(xml.split("<page ")[1:], images, strict=True), 1):
        gray = Image.open(image).convert("L")
        for match in word.finditer(chunk):
            text = unescape(match.group(5))
            if NUMBER.fullmatch(text):
                box = [float(v) * DPI / 72 for v in match.group(1, 2, 3, 4)]
                found.append((page, text, _ink_height(gray, box)))
    reference = [height for _, text, height in found if text == REFERENCE]
    assert len(reference) == 1, f"the reference {REFERENCE} was not found once on the pages"
    return [Figure(p, t, h / reference[0]) for p, t, h in found if t != REFERENCE]


def _ink_height(gray: object, box: list[float]) -> float:
    """Rows of ink in the word's box, each counted by its darkest pixel's coverage (so an
    anti-aliased edge row counts as the fraction it covers)."""
    x0, y0, x1, y1 = box
    crop = gray.crop((int(x0), int(y0) - 2, int(x1) + 1, int(y1) + 3))  # type: ignore[attr-defined]
    width, height = crop.size
    pixels = crop.load()
    return sum((255 - min(pixels[x, y] for x in range(width))) / 255 for y in range(height))
