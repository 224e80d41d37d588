"""Load the Runs page's libraries while the browser loads Streamlit's code.

Between a browser's request for the Runs page (the default page) and that page's first run, the server
only waits: the browser fetches and starts Streamlit's bundle (about a second here). The first run then
imported the page helpers (pandas, pyarrow, DuckDB, the store: most of a fresh server's first run)
before it could draw the Runs table. The access gate (``pages.access_gate``, in front of every route of
``stabscope serve`` and ``streamlit run app.py``) calls :func:`page_requested` with the first page the
browser asks for; for the Runs page, a thread imports them in that idle second. A chart page is left
alone: its imports already overlap the browser's loading of Plotly's code (``pages.parts.warmup``), and
on a machine with few cores a preload only competed with the browser for them (the overview was drawn
later on the 2-core machine of docs/performance.md).

No module is imported from two threads at once: the app's first run waits for the thread
(:func:`wait`, in ``pages.navigation.run_app``) before anything of its own imports a library, and
nothing here touches Plotly, whose lazy submodules are not safe to load from two threads (importing the
page helpers on a thread without that wait raced the page's warm-up chart and was dropped; Streamlit
has loaded the ``plotly`` package itself by then).
"""

from __future__ import annotations

import importlib
import threading

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
RUNS_PAGE_PATHS = frozenset({"/", "/runs", "/home"})
"""The Runs page's addresses: the default page at ``/`` (its url_path ``home``) and its ``/runs`` alias
(``pages.navigation.NAVIGATION``)."""
FIRST_RUN_WAIT_S = 30.0
"""Longest wait (seconds) of the first run for the thread; past it the run imports on its own."""

_LOG = get_logger(__name__)
_lock = threading.Lock()
_first_page: str | None = None
_thread: threading.Thread | None = None


def page_requested(path: str) -> None:
    """The browser asked for the page at ``path`` (a request the gate let through). The first such
    request of the server decides: for the Runs page, :data:`FIRST_SCREEN_MODULES` are imported on a
    daemon thread; for any other page nothing is."""
    global _first_page, _thread  # one preload per server process
    with _lock:
        if _first_page is not None:
            return
        _first_page = path
        if path not in RUNS_PAGE_PATHS and path.rstrip("/") not in RUNS_PAGE_PATHS:
            return
        _thread = threading.Thread(target=_preload, name="stabscope-preload", daemon=True)
        _thread.start()


def wait(timeout_s: float = FIRST_RUN_WAIT_S) -> None:
    """Return once the preload :func:`page_requested` started is done (at once where none was started:
    a chart page first, AppTest)."""
    thread = _thread
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout_s)


def _preload() -> None:
    for name in FIRST_SCREEN_MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the page's own import of it fails again, and is reported there
            _LOG.warning("preloading %s failed: %s: %s", name, type(exc).__name__, exc)
            return
