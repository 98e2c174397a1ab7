"""The documentation site: ``mkdocs build --strict`` passes (a broken link, a missing page or a
page left out of the nav fails it), its reference pages cover the code they are generated from,
and ``certbench serve``'s app serves the built site at ``/guide`` (and nothing there without it).

One build per module (about 15 s of CPU, most of it importing the service to read its OpenAPI
document), reused by every test here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from models.core.settings import Settings
from tests.support import timing
from tests.support.doc_blocks import ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timing.seconds(600),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return folder


def test_the_site_builds_strictly_with_every_section(site: Path):
    for page in (
        "index.html",
        "getting-started.html",
        "researchers/certify.html",
        "datasets/generate.html",
        "operators/deployment.html",
        "architecture/index.html",
        "reference/cli.html",
        "reference/rest.html",
        "reference/settings.html",
        "benchmarks/results.html",
    ):
        assert (site / page).is_file(), page
    assert (site / "assets" / "leaderboard.png").is_file()
    assert not (site / "hooks").exists(), "the build hook is not a page"


def test_pages_load_nothing_from_other_hosts(site: Path):
    """The guide works offline: no script, stylesheet or font from a CDN (links are fine)."""
    pattern = re.compile(r'<(?:script|link)[^>]+(?:src|href)="(https?:)?//', re.I)
    offending = [
        str(page.relative_to(site))
        for page in site.rglob("*.html")
        if pattern.search(page.read_text(encoding="utf-8"))
    ]
    assert not offending, offending


#: Internal names a public page must not show: the project's own seed-paper numbering, and
#: absolute paths of the machine the site was built on.
PRIVATE_TEXT = re.compile(r"\bseeds?\s+0\d\d\b|(?<![\w.])/(?:work|root|home|tmp|usr)/", re.I)


def test_pages_cite_papers_not_seed_numbers_and_show_no_local_paths(site: Path):
    found = [
        (str(page.relative_to(site)), match.group())
        for page in site.rglob("*.html")
        for match in PRIVATE_TEXT.finditer(page.read_text(encoding="utf-8"))
    ]
    assert not found, found


def test_the_cli_reference_lists_every_command(site: Path):
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    from reference import _walk, cli_command

    text = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    for path, command in _walk(cli_command(), ["certbench"]):
        assert " ".join(path) in text
        for param in command.params:
            for option in getattr(param, "opts", []):
                if option.startswith("--") and not param.hidden:
                    assert option in text, (path, option)


def test_the_rest_reference_lists_every_route(site: Path):
    app = create_app(Settings(data_dir=site.parent / "rest-data"))
    text = (site / "reference" / "rest.html").read_text(encoding="utf-8")
    for path, item in app.openapi()["paths"].items():
        for method in item:
            assert f"{method.upper()} {path}" in text, (method, path)


def test_the_settings_reference_lists_every_setting_with_its_description(site: Path):
    text = (site / "reference" / "settings.html").read_text(encoding="utf-8")
    for name, field in Settings.model_fields.items():
        assert field.description, f"Settings.{name} has no description for the reference"
        assert f"CERTBENCH_{name.upper()}" in text


def test_serve_mounts_the_built_site_at_guide(site: Path, tmp_path: Path):
    with TestClient(create_app(Settings(data_dir=tmp_path, guide_dir=site))) as client:
        home = client.get("/guide/")
        assert home.status_code == 200 and "certbench" in home.text
        assert home.headers["content-type"].startswith("text/html")
        page = client.get("/guide/reference/cli.html")
        assert page.status_code == 200 and "certbench certify" in page.text
        assert client.get("/guide/assets/leaderboard.png").content[:8] == b"\x89PNG\r\n\x1a\n"
        assert client.get("/guide/no-such-page.html").status_code == 404


def test_guide_says_how_to_build_it_then_serves_it_without_a_restart(tmp_path: Path):
    """Issue 34 §3: without a built site ``/guide`` answered a JSON 404 until the service was
    restarted after ``mkdocs build``, and no page linked to it."""
    site = tmp_path / "not-built-yet"
    settings = Settings(data_dir=tmp_path, guide_dir=site)
    with TestClient(create_app(settings)) as client:
        for url in ("/guide", "/guide/", "/guide/researchers/certify/"):
            missing = client.get(url)
            assert missing.status_code == 404 and missing.headers["content-type"].startswith(
                "text/html"
            ), url
            assert "uv run mkdocs build" in missing.text and "no restart" in missing.text
            assert str(tmp_path) not in missing.text  # no server path in a page
            assert '<a href="/guide/">Guide</a>' in missing.text  # the nav of every page
        (site / "researchers").mkdir(parents=True)  # built while the service runs
        (site / "index.html").write_text("<h1>the built guide</h1>", encoding="utf-8")
        (site / "researchers" / "index.html").write_text("certify", encoding="utf-8")
        assert client.get("/guide/").text == "<h1>the built guide</h1>"
        moved = client.get("/guide", follow_redirects=False)
        assert moved.status_code in (307, 308) and moved.headers["location"].endswith("/guide/")
        assert client.get("/guide/researchers/").text == "certify"
        assert client.get("/guide/../../etc/passwd").status_code == 404


#: What does not fit on a guide page (JavaScript): a command block that hides its end behind a
#: scroll bar, an option or command name broken over two lines, sidebar entries drawn over each
#: other (issue 34 §4: at 1,280 px the nav title covered "Researchers", the reproduce block was
#: clipped and "--install-" / "completion" broke at its hyphen).
GUIDE_PROBLEMS = """() => {
  const out = [];
  document.querySelectorAll(".md-typeset pre > code").forEach((c) => {
    if (c.scrollWidth > c.clientWidth + 1) out.push(`clipped: ${c.textContent.slice(0, 50)}`);
  });
  document.querySelectorAll(".md-typeset td code, .md-typeset .cli-names code").forEach((c) => {
    if (c.getClientRects().length > 1) out.push(`${c.textContent} breaks over two lines`);
  });
  const shown = Array.from(document.querySelectorAll(
      ".md-nav--primary .md-nav__title, .md-nav--primary .md-nav__link"))
    .filter((e) => e.getBoundingClientRect().width > 0 && e.textContent.trim());
  shown.forEach((a, i) => shown.slice(i + 1).forEach((b) => {
    if (a.contains(b) || b.contains(a)) return;
    const p = a.getBoundingClientRect(), q = b.getBoundingClientRect();
    const x = Math.min(p.right, q.right) - Math.max(p.left, q.left);
    const y = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
    if (x > 1 && y > 1) out.push(`${a.textContent.trim()} is drawn over ${b.textContent.trim()}`);
  }));
  return out;
}"""


def test_the_guide_fits_at_1280_px(site: Path, browser: Any):
    """The guide's pages in Chromium at 1,280 CSS px: every command block whole, no option name
    broken at a hyphen, no sidebar entry over another."""
    pages = ("reference/cli.html", "researchers/reproducing.html", "researchers/certify.html",
             "getting-started.html")  # fmt: skip
    problems: dict[str, list[str]] = {}
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        for name in pages:
            page.goto((site / name).as_uri())
            found = page.evaluate(GUIDE_PROBLEMS)
            if found:
                problems[name] = found[:8]
    finally:
        page.close()
    assert not problems, problems
