"""The model page's figures: page weight and time to render, and the charting library choice.

Seeds the web tests' database (``tests/support/web_seed.py``: real records through the service
layer), then, for the model page of a six-test-set entry (certified accuracy of 7 curves, the
p_A distribution of 3 entries with a band):

- server: median time to render the HTML (FastAPI TestClient, in process) and its size;
- browser (Debian Chromium via Playwright, every request answered from this process, so only
  the page is timed): time from navigation to every figure drawn, and the bytes transferred
  (HTML + scripts, raw and gzip);
- Plotly, for the choice: the same figures as Plotly figures (lines with a filled band) drawn
  by plotly.js from the Python package (only when ``plotly`` is installed: it is not a
  dependency), same page, same browser.

Ratios are printed against the Vega-Lite page (the reference run in the same process). Run it
from any checkout: an older one (hand-written SVG) gives the "before" row.

    uv run python benchmarks/web_figures.py            # 15 renders per page
    uv run python benchmarks/web_figures.py --smoke    # 2 renders, a quick check
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]
CHROMIUM = os.environ.get("CERTBENCH_CHROMIUM", "/usr/bin/chromium")


def _seed(folder: Path) -> tuple[Any, dict[str, dict[str, int]]]:
    import migrations
    from models.core.settings import Settings
    from models.db.engine import session_scope
    from tests.support.web_seed import seed_database

    settings = Settings(data_dir=folder / "data", environment="test")
    migrations.upgrade(settings)
    with session_scope(settings) as session:
        seeded = seed_database(session, settings, folder / "dataset")
    return settings, seeded.entries


def _server_times(client: Any, path: str, repeats: int) -> tuple[float, int, str]:
    client.get(path)  # warm caches (records, templates)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        response = client.get(path)
        times.append(time.perf_counter() - start)
    return statistics.median(times), len(response.content), response.text


def _browser_time(
    browser: Any, html: str, assets: dict[str, bytes], repeats: int
) -> tuple[float, int, int]:
    """Median ms from navigation to every figure drawn; bytes (raw, gzip) of page + scripts."""
    sizes = [len(html.encode())] + [len(b) for b in assets.values()]
    zipped = [len(gzip.compress(html.encode()))] + [len(gzip.compress(b)) for b in assets.values()]
    times = []
    for _ in range(repeats):
        page = browser.new_page(viewport={"width": 1400, "height": 900})

        def answer(route: Any) -> None:
            url = route.request.url
            path = "/" + url.split("/", 3)[3] if url.count("/") >= 3 else "/"
            if path == "/page":
                route.fulfill(body=html, content_type="text/html")
            elif path.split("?")[0] in assets:
                route.fulfill(body=assets[path.split("?")[0]], content_type="text/javascript")
            else:
                route.fulfill(status=204, body="")

        page.route("**/*", answer)
        start = time.perf_counter()
        page.goto("http://bench.local/page")
        page.wait_for_function(
            "!document.querySelector('div.vega-chart, div.plotly-chart') ||"
            " document.documentElement.dataset.charts", timeout=60_000
        )  # fmt: skip
        times.append((time.perf_counter() - start) * 1000)
        page.close()
    return statistics.median(times), sum(sizes), sum(zipped)


def _plotly_page(specs: dict[str, dict[str, Any]]) -> tuple[str, dict[str, bytes]]:
    """The same figures (curves with bands, heatmaps, bars) as Plotly figures."""
    import plotly.graph_objects as go
    import plotly.offline

    divs, calls = [], []
    for name, spec in specs.items():
        rows = spec["data"]["values"]
        fig = go.Figure()
        if rows and "series" in rows[0] and "x" in rows[0]:
            for label in dict.fromkeys(r["series"] for r in rows):
                mine = [r for r in rows if r["series"] == label]
                xs, ys = [r["x"] for r in mine], [r["y"] for r in mine]
                if "lo" in mine[0]:
                    fig.add_scatter(x=xs + xs[::-1], y=[r["hi"] for r in mine]
                                    + [r["lo"] for r in mine][::-1], fill="toself",
                                    opacity=0.18, line={"width": 0}, showlegend=False)  # fmt: skip
                fig.add_scatter(x=xs, y=ys, mode="lines", name=label)
        elif rows and "group" in rows[0]:
            for label in dict.fromkeys(r["series"] for r in rows):
                mine = [r for r in rows if r["series"] == label]
                fig.add_bar(x=[r["group"] for r in mine], y=[r["value"] for r in mine], name=label)
        fig.update_layout(title=spec["title"]["text"], width=600, height=420,
                          legend={"orientation": "h"})  # fmt: skip
        divs.append(f'<div class="plotly-chart" id="{name}"></div>')
        calls.append(f"Plotly.newPlot({json.dumps(name)}, {fig.to_json()})")
    script = (
        "<script src='/plotly.js'></script><script>Promise.all(["
        + ",".join(calls)
        + "]).then(() => { document.documentElement.dataset.charts = 'drawn'; });</script>"
    )
    html = "<!doctype html><html><body>" + "".join(divs) + script + "</body></html>"
    return html, {"/plotly.js": plotly.offline.get_plotlyjs().encode()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--smoke", action="store_true", help="2 renders per page: a quick check")
    args = parser.parse_args()
    repeats = 2 if args.smoke else args.repeats
    from fastapi.testclient import TestClient
    from playwright.sync_api import sync_playwright

    from api.main import create_app

    with tempfile.TemporaryDirectory() as tmp:
        settings, entries = _seed(Path(tmp))
        client = TestClient(create_app(settings))
        path = f"/models/{entries['webbands']['Bravo']}"
        seconds, size, html = _server_times(client, path, repeats)
        print(f"server: {path} rendered in {seconds * 1000:.1f} ms (median of {repeats}), "
              f"{size / 1024:.1f} KiB of HTML")  # fmt: skip
        assets = {}
        for src in ("/static/certbench.js", *_scripts(html)):
            body = client.get(src).content
            assets[src] = body
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            ms, raw, zipped = _browser_time(browser, html, assets, repeats)
            print(f"{'page':<26}{'to drawn (ms)':>14}{'bytes':>12}{'gzip':>12}")
            print(f"{'this checkout':<26}{ms:>14.0f}{raw:>12,}{zipped:>12,}")
            specs = _specs(html)
            try:
                plotly_html, plotly_assets = _plotly_page(specs)
            except ImportError:
                print("plotly is not installed here: `uv pip install plotly` for its row")
            else:
                if specs:
                    p_ms, p_raw, p_zip = _browser_time(browser, plotly_html, plotly_assets, repeats)
                    print(f"{'Plotly, same figures':<26}{p_ms:>14.0f}{p_raw:>12,}{p_zip:>12,}")
                    print(f"ratio Plotly / this: time {p_ms / ms:.2f}×, bytes {p_raw / raw:.2f}×,"
                          f" gzip {p_zip / zipped:.2f}×")  # fmt: skip
            browser.close()
        client.close()


def _scripts(html: str) -> list[str]:
    import re

    return [s for s in re.findall(r'<script src="([^"]+)"', html) if s != "/static/certbench.js"]


def _specs(html: str) -> dict[str, dict[str, Any]]:
    import re

    found = re.findall(
        r'<script type="application/json" id="([^"]+)-spec">(.*?)</script>', html, re.S
    )
    return {name: json.loads(body) for name, body in found}


if __name__ == "__main__":
    main()
