"""The Runs page's preload (``pages.parts.first_screen_preload``, docs/performance.md goal 6): the first
page a browser asks for through the access gate decides; the Runs page's libraries load on a thread, a
chart page's do not, and none of Plotly's lazy submodules load on the thread (they are not safe to load
from two threads)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from pages.parts import first_screen_preload

REPO = Path(__file__).resolve().parents[1]

PROBE = """
import asyncio, json, sys
import streamlit  # the server has it loaded (and with it the plotly package) before any page is asked for
from pages.access_gate import AccessGate, settings_for
from pages.parts import first_screen_preload as preload

async def app(scope, receive, send):  # Streamlit's application behind the gate
    await send({{"type": "http.response.start", "status": 200, "headers": []}})
    await send({{"type": "http.response.body", "body": b"ok"}})

async def get(gate, path):
    sent = []
    async def receive():
        return {{"type": "http.request", "body": b""}}
    async def send(message):
        sent.append(message)
    scope = {{"type": "http", "method": "GET", "path": path, "query_string": b"",
              "headers": [(b"host", b"127.0.0.1:8501")]}}
    await gate(scope, receive, send)
    return sent[0]["status"]

gate = AccessGate(app, settings_for(8501, None, host_names=("127.0.0.1", "localhost")))
plotly_before = {{m for m in sys.modules if m.startswith("plotly")}}
statuses = [asyncio.run(get(gate, path)) for path in {paths!r}]
preload.wait()
print(json.dumps({{
    "statuses": statuses,
    "first_page": preload._first_page,
    "loaded": [m for m in preload.FIRST_SCREEN_MODULES if m in sys.modules],
    "new_plotly": sorted({{m for m in sys.modules if m.startswith("plotly")}} - plotly_before),
}}))
"""


def _probe(paths: list[str]) -> dict[str, object]:
    code = PROBE.format(paths=paths)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_the_runs_page_first_loads_its_libraries_and_no_plotly_submodule() -> None:
    # the health check and Streamlit's own routes are no page: the first page is the Runs page at /
    found = _probe(["/_stcore/health", "/static/js/main.js", "/", "/overview"])
    assert found["statuses"] == [200, 200, 200, 200]
    assert found["first_page"] == "/"
    assert found["loaded"] == list(first_screen_preload.FIRST_SCREEN_MODULES)
    assert found["new_plotly"] == []


def test_a_chart_page_first_preloads_nothing() -> None:
    """Its imports overlap the browser's loading of Plotly's code already; a later Runs page changes nothing."""
    found = _probe(["/overview", "/"])
    assert found["first_page"] == "/overview"
    # streamlit loads none of these itself: only the preload would have
    assert not {"duckdb", "ingest.store.facade", "pages.parts.store_access"} & set(found["loaded"])  # type: ignore[arg-type]


def test_without_a_preload_the_first_run_does_not_wait() -> None:
    """Under AppTest no browser asked for a page: the first run goes on at once."""
    assert first_screen_preload._thread is None  # this test process never served a page
    start = time.monotonic()
    first_screen_preload.wait(timeout_s=5.0)
    assert time.monotonic() - start < 0.5
