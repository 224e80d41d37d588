"""Retake the README's pictures: ``python docs/screenshots.py`` (writes docs/img/*.png).

Seeds a throwaway demo store, starts ``streamlit run app.py`` on it and photographs the key pages in
headless Chromium (Debian's ``/usr/bin/chromium`` through Playwright) at 1280x800, each scrolled to
what the picture is about: the same way the browser test takes its screenshots.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "img"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
SHOTS = [  # (file, page and query, element to scroll to the top, or None for the page's top)
    ("overview.png", "overview?run=demo-moe-2b", ".st-key-ov_chart"),
    ("decision-tree.png", "tree?run=s1-moe-7b-before", None),
    ("spikes.png", "spikes?run=s3-dense-140b-before", None),
    ("scheduler.png", "scheduler", None),
]


def _settled(page: Any) -> None:
    page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']", timeout=60_000)
    page.wait_for_timeout(2500)  # charts and tables draw after the run


def main() -> None:
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(REPO))
    from ingest.services.demo import seed_demo_store
    from ingest.services.run_analyses import open_analysed_store

    with tempfile.TemporaryDirectory(prefix="stabscope-shots-") as tmp:
        store = open_analysed_store(Path(tmp) / "store")
        seed_demo_store(store)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        env = {**os.environ, "STABSCOPE_STORE": str(store.root)}
        cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
               "--server.headless", "true", "--browser.gatherUsageStats", "false"]  # fmt: skip
        server = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(300):
                try:
                    urllib.request.urlopen(f"{url}/_stcore/health", timeout=2)
                    break
                except OSError:
                    time.sleep(0.2)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                for name, path, anchor in SHOTS:
                    page.goto(f"{url}/{path}")
                    _settled(page)
                    if anchor:
                        page.locator(anchor).first.evaluate("e => e.scrollIntoView({block: 'start'})")
                        page.wait_for_timeout(500)
                    page.screenshot(path=str(OUT / name))
                    print(f"wrote {OUT / name}")
                browser.close()
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
