"""``stabscope serve``'s first-screen preload (``pages.parts.first_screen_preload``, docs/performance.md goal 6):
the first page's libraries load once the server listens, never before, and none of Plotly's lazy submodules
load on the thread (they are not safe to load from two threads)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from pages.parts import first_screen_preload

REPO = Path(__file__).resolve().parents[1]

PROBE = """
import json, socket, sys, time
import streamlit  # the server has it loaded (and with it the plotly package) before the preload starts
from pages.parts import first_screen_preload as preload
listening = {listening}
server = socket.socket()
server.bind(("127.0.0.1", 0))
port = server.getsockname()[1]
if listening:
    server.listen()
else:
    server.close()  # nothing listens on the port now
plotly_before = {{m for m in sys.modules if m.startswith("plotly")}}
start = time.monotonic()
preload.start("0.0.0.0" if listening else "127.0.0.1", port, listen_wait_s=0.5)
preload.wait()
print(json.dumps({{
    "loaded": [m for m in preload.FIRST_SCREEN_MODULES if m in sys.modules],
    "new_plotly": sorted({{m for m in sys.modules if m.startswith("plotly")}} - plotly_before),
    "waited_s": time.monotonic() - start,
}}))
"""


def _probe(listening: bool) -> dict[str, object]:
    code = PROBE.format(listening=listening)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_a_listening_server_gets_the_first_screens_modules_and_no_plotly_submodule() -> None:
    found = _probe(listening=True)
    assert found["loaded"] == list(first_screen_preload.FIRST_SCREEN_MODULES)
    assert found["new_plotly"] == []


def test_nothing_is_preloaded_while_nothing_listens() -> None:
    found = _probe(listening=False)
    # streamlit loads none of these itself: only the preload would have
    assert not {"duckdb", "ingest.store.facade", "pages.parts.store_access"} & set(found["loaded"])  # type: ignore[arg-type]
    assert 0.5 <= float(found["waited_s"]) < 10.0  # type: ignore[arg-type]  # gave up after listen_wait_s


def test_without_a_preload_the_first_run_does_not_wait() -> None:
    """Under ``streamlit run app.py`` nothing started a preload: the first run goes on at once."""
    assert first_screen_preload._thread is None  # this test process never served
    start = time.monotonic()
    first_screen_preload.wait(timeout_s=5.0)
    assert time.monotonic() - start < 0.5
