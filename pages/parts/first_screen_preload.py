"""Load the first screen's libraries while the browser loads Streamlit's code (``stabscope serve`` only).

Between the moment ``stabscope serve`` listens and the first page's run, the server only waits: the
browser fetches and starts Streamlit's bundle (about a second here). The first run then imported the
page helpers (pandas, pyarrow, DuckDB, the store: most of a fresh server's first run) before it could
draw the Runs table. :func:`start` imports them on a thread as soon as the server accepts connections,
in that idle second.

No module is imported from two threads at once: the app's first run waits for the thread
(:func:`wait`, in ``pages.navigation.run_app``) before anything of its own imports a library, and
nothing here touches Plotly, whose lazy submodules are not safe to load from two threads (importing the
page helpers on a thread without that wait raced the page's warm-up chart and was dropped; Streamlit
has loaded the ``plotly`` package itself by then).
"""

from __future__ import annotations

import importlib
import socket
import threading
import time

from streamlit.logger import get_logger

FIRST_SCREEN_MODULES = (
    "pandas",
    "pyarrow",
    "duckdb",
    "ingest.store.facade",
    "ingest.services.run_analyses",
    "ingest.services.run_status",
    "pages.parts.store_access",
    "pages.parts.alert_banners",
    "pages.parts.page_errors",
    "pages.parts.widgets",
    "pages.parts.run_catalog",
)
"""What app.py's first run and the Runs page import before the first screen is drawn, Plotly's figure
builders (``pages.parts.charts``) left out (see the module's docstring)."""
LISTEN_POLL_S = 0.02
"""How often (seconds) the thread tries the server's port until it accepts a connection."""
LISTEN_WAIT_S = 120.0
"""Longest wait (seconds) for the server to listen; past it nothing is preloaded (the pages import as usual)."""
FIRST_RUN_WAIT_S = 30.0
"""Longest wait (seconds) of the first run for the thread; past it the run imports on its own."""

_LOG = get_logger(__name__)
_thread: threading.Thread | None = None


def start(host: str, port: int, *, listen_wait_s: float = LISTEN_WAIT_S) -> None:
    """Import :data:`FIRST_SCREEN_MODULES` on a daemon thread once ``host:port`` accepts connections
    (a wildcard address is tried on loopback)."""
    global _thread  # one preload per server process
    _thread = threading.Thread(
        target=_preload, args=(_reachable_host(host), port, listen_wait_s), name="stabscope-preload", daemon=True
    )
    _thread.start()


def wait(timeout_s: float = FIRST_RUN_WAIT_S) -> None:
    """Return once the preload started by :func:`start` is done (at once where none was started, as
    under ``streamlit run app.py``, or once it is done)."""
    thread = _thread
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout_s)


def _preload(host: str, port: int, listen_wait_s: float) -> None:
    deadline = time.monotonic() + listen_wait_s
    while not _accepts(host, port):
        if time.monotonic() > deadline:
            return
        time.sleep(LISTEN_POLL_S)
    for name in FIRST_SCREEN_MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the page's own import of it fails again, and is reported there
            _LOG.warning("preloading %s failed: %s: %s", name, type(exc).__name__, exc)
            return


def _accepts(host: str, port: int) -> bool:
    """Whether something listens on ``host:port`` (a connection opened and closed, nothing sent)."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _reachable_host(host: str) -> str:
    """Where this machine reaches a server bound to ``host``: loopback for the wildcard addresses."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
