"""Take the README's screenshot, docs/assets/leaderboard.png: the demo leaderboard of a fresh
``certbench serve`` once its two reference entries have finished, in the headless Debian Chromium
the browser tests use (``CERTBENCH_CHROMIUM``, default /usr/bin/chromium), 1,400 px wide.

    uv run --frozen python scripts/screenshot_leaderboard.py [--out docs/assets/leaderboard.png]

Everything runs in a temporary folder, offline (the demo needs no network); a few minutes on a
2-core CPU, most of it starting the service and certifying the two entries.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DEMO = "demo-digits"
WIDTH = 1400


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait(check, what: str, timeout: float, serve: subprocess.Popen, log: Path) -> None:
    """Poll ``check`` until it is true; fail with the service's log if ``serve`` exits or time
    runs out."""
    deadline = time.monotonic() + timeout
    while not check():
        if serve.poll() is not None or time.monotonic() > deadline:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            state = "exited" if serve.poll() is not None else "still running"
            raise SystemExit(f"no {what} (certbench serve {state}); its log ends:\n{tail}")
        time.sleep(1)


def answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/health", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def references_finished(base: str) -> bool:
    rows = httpx.get(f"{base}/api/v1/leaderboards/{DEMO}", timeout=30).json()["rows"]
    return len(rows) >= 2


def screenshot(base: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("CERTBENCH_CHROMIUM", "/usr/bin/chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 900})
            page.goto(f"{base}/leaderboards/{DEMO}")
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(out), full_page=True)
        finally:
            browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "assets" / "leaderboard.png")
    args = parser.parse_args()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as folder:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CERTBENCH_")}
        env.update(
            HF_HUB_OFFLINE="1",
            HF_DATASETS_OFFLINE="1",
            XDG_CONFIG_HOME=f"{folder}/config",
            XDG_CACHE_HOME=f"{folder}/cache",
            OMP_NUM_THREADS="1",
        )
        log = Path(folder) / "serve.log"
        command = ["serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
        serve = subprocess.Popen(
            [str(BIN / "certbench"), *command],
            cwd=folder,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        try:
            wait(lambda: answers(base), "answer from the service", 1200, serve, log)
            wait(lambda: references_finished(base), "finished reference entries", 1200, serve, log)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            screenshot(base, args.out)
        finally:
            serve.send_signal(signal.SIGINT)  # what Ctrl-C does: uvicorn stops, then the worker
            try:
                serve.wait(timeout=120)
            except subprocess.TimeoutExpired:
                serve.kill()
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")


if __name__ == "__main__":
    main()
