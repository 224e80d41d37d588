"""`stabscope serve` (the README's first command): in a real browser, a deep link as the very first
request of a fresh server must run inside app.py's navigation, not Streamlit's old pages/ mode; and
the server stops with the process the user started."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from ingest.services.run_analyses import open_analysed_store
from tests.conftest import REPO_ROOT, RunSpec, write_run
from tests.test_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, VIEWPORT, _free_port, _wait_healthy

pytestmark = pytest.mark.slow


@contextlib.contextmanager
def _fresh_server(tmp_path: Path, serve: bool) -> Iterator[str]:
    """:func:`_server`'s URL, for a test that opens it in Chromium."""
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium is not installed (bash .ci/test installs it)")
    with _server(tmp_path, serve) as (url, _):
        yield url


@contextlib.contextmanager
def _server(
    tmp_path: Path, serve: bool, *, serve_args: Sequence[str] = (), env_extra: Mapping[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A fresh server on a store holding one generated run: ``stabscope serve`` (with ``serve_args``)
    or plain ``streamlit run app.py``; yields its URL on 127.0.0.1 and its process once its health
    check answers. Its output goes to ``tmp_path / "server.log"``."""
    store = tmp_path / "store"
    write_run(open_analysed_store(store), RunSpec())
    port = _free_port()
    log = tmp_path / "server.log"
    base_env = {k: v for k, v in os.environ.items() if k != "STABSCOPE_TOKEN"}  # no token but the test's
    if serve:
        env = {**base_env, "PYTHONPATH": str(REPO_ROOT), **(env_extra or {})}
        cmd = [sys.executable, "-m", "ingest", "serve", "--store", str(store), "--port", str(port), "--no-demo",
               *serve_args]  # fmt: skip
    else:
        env = {**base_env, "STABSCOPE_STORE": str(store), "STABSCOPE_NO_DEMO": "1", **(env_extra or {})}
        cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
               "--server.headless", "true"]  # fmt: skip
    cwd = tmp_path if serve else REPO_ROOT  # serve must find the app from anywhere
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, proc, log)
        yield url, proc
    finally:
        proc.terminate()
        proc.wait(30)


def printed_token(log: Path) -> str:
    """The access token ``stabscope serve`` made at its start, from the address it printed in ``log``
    (serve is private by default: without ``--token*`` it makes one)."""
    printed = re.search(r"/\?token=([A-Za-z0-9_-]+)", log.read_text())
    assert printed, f"serve printed no address with a token:\n{log.read_text()[-3000:]}"
    return printed.group(1)


def sign_in_cookie(url: str, token: str) -> str:
    """The access cookie (``name=value``) a server behind ``pages.access_gate`` sets for ``?token=``."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    conn.request("GET", f"/?token={token}")
    response = conn.getresponse()
    response.read()
    conn.close()
    assert response.status == 303, response.status
    return str(response.getheader("set-cookie")).split(";")[0]


def test_serve_stops_when_its_process_is_killed(tmp_path: Path) -> None:
    """``kill PID`` of ``stabscope serve`` (SIGTERM, as a supervisor or a user sends it) stops the
    server: Streamlit runs in the CLI's own process. It used to run as a child, which went on serving
    the port as an orphan after the CLI was killed."""
    with _server(tmp_path, serve=True) as (url, proc):
        proc.terminate()
        assert proc.wait(30) == 0  # Streamlit's own SIGTERM handler: a clean stop
        with pytest.raises(OSError):  # nothing answers on the port any more
            urllib.request.urlopen(f"{url}/_stcore/health", timeout=5)


@pytest.mark.browser
def test_serve_deep_link_first_request_keeps_the_app_navigation(tmp_path: Path) -> None:
    playwright = pytest.importorskip("playwright.sync_api")
    with _fresh_server(tmp_path, serve=True) as url, playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        # serve is private by default: the deep link carries the token it printed (the gate then
        # redirects to /overview with its cookie, and that is Streamlit's first request)
        page.goto(f"{url}/overview?token={printed_token(tmp_path / 'server.log')}")
        page.get_by_text("Run overview").first.wait_for(timeout=60_000)
        nav = page.locator('[data-testid="stSidebarNav"]').inner_text(timeout=30_000)
        overview = page.locator('[data-testid="stMain"]').inner_text(timeout=30_000)
        page.goto(f"{url}/upload")
        page.get_by_text("Upload logs").first.wait_for(timeout=60_000)
        page.wait_for_timeout(1000)
        upload = page.locator('[data-testid="stMain"]').inner_text(timeout=30_000)
        browser.close()
    assert "Decision tree" in nav and "Cost of rollback" in nav
    assert "common" not in nav.lower() and "charts" not in nav.lower()
    # no constant's docstring drawn by Streamlit's "magic" (navigation.py is serve's main script)
    assert "The folder of the page scripts" not in overview and "The sidebar's sections" not in overview
    assert "Seconds an import waits" not in upload


@pytest.mark.browser
def test_streamlit_run_deep_link_first_request_in_dark_mode(tmp_path: Path) -> None:
    """Plain ``streamlit run app.py`` (no serve wrapper): the first request of a fresh server is a deep
    link from a browser that prefers dark. The page must run inside app.py's navigation (the pages
    module leaves the old pages/ mode and reruns) and be drawn in the dark theme."""
    playwright = pytest.importorskip("playwright.sync_api")
    with _fresh_server(tmp_path, serve=False) as url, playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_context(viewport=VIEWPORT, color_scheme="dark").new_page()
        page.goto(f"{url}/ranks")
        page.get_by_text("Outlier ranks").first.wait_for(timeout=60_000)
        page.locator(".st-key-rk_heat .main-svg").first.wait_for(timeout=60_000)  # the heatmap, not the warm-up
        page.locator("[data-testid='stSelectbox']").first.wait_for(timeout=30_000)  # widgets drawn too
        page.wait_for_timeout(1000)
        nav = page.locator('[data-testid="stSidebarNav"]').inner_text(timeout=30_000)
        background = page.evaluate("getComputedStyle(document.querySelector('.stApp')).backgroundColor")
        text = page.evaluate("getComputedStyle(document.querySelector('h1')).color")
        page.screenshot(path=str(ARTIFACTS / "ranks-dark.png"))
        browser.close()
    assert "Decision tree" in nav and "common" not in nav.lower()
    back, fore = (_luminance(c) for c in (background, text))
    assert back < 0.1 < 0.7 < fore, (background, text)  # dark page, light text


def _luminance(css_rgb: str) -> float:
    """Relative luminance (0 black .. 1 white) of a CSS ``rgb(r, g, b)`` colour, sRGB weights."""
    r, g, b = (int(v) / 255 for v in re.findall(r"\d+", css_rgb)[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b
