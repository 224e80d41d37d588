"""The server process of ``stabscope serve`` (not a page): ``ingest.cli`` resolves the store and
then replaces its own process with this one (``os.execv``), so that the CLI never loads Streamlit and
a ``kill`` of the PID the user started stops the server."""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app.py"
"""The Streamlit entry point this process runs."""


def page_scripts() -> list[str]:
    """The page scripts app.py navigates to (``runs``, ``upload``...): the other modules of pages/ are
    the helpers they import. A page script draws when it runs, so it is never imported ahead."""
    return sorted(set(re.findall(r'st\.Page\("pages/(\w+)\.py"', APP.read_text())))


def main(port: int) -> int:
    """Prepare, seed the demo runs on a first start, then run Streamlit on app.py (blocks); the exit
    status."""
    _prepare_server()
    _print_network_url(port)
    from ingest.cli import EXIT_ERROR, seed_before_serving

    if not os.environ.get("STABSCOPE_NO_DEMO"):
        status = seed_before_serving()
        if status:
            return status
    from streamlit.web.cli import main as streamlit_main

    flags = ["--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false"]
    try:
        streamlit_main(args=["run", str(APP), *flags], prog_name="streamlit")
    except SystemExit as exc:  # click ends its command with sys.exit
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_ERROR)
    return 0


def _prepare_server() -> None:
    """Before the server listens.

    Streamlit treats a folder named pages/ beside the entry script as an old-style multipage app until
    app.py has called st.navigation once; a deep link (/overview) as the first request of a fresh
    server would then run that page without app.py. Declaring the app navigation-driven before
    start-up avoids it (the ``pages`` package also recovers from it, with one extra rerun, under a
    plain ``streamlit run app.py``).

    It also imports what every page needs (numpy, pandas, DuckDB, Plotly: every page helper), as a
    server that preloads its app does: ready means ready, and the first browser session does not wait
    for them (Streamlit itself imports them lazily)."""
    from streamlit.runtime.pages_manager import PagesManager

    PagesManager.uses_pages_directory = False
    # Decorating a cached function before the server's runtime exists makes Streamlit check its
    # settings against a stand-in and warn "No runtime found" once per function; the caches
    # themselves are made on first call, inside the runtime. The user would see only noise.
    caching = logging.getLogger("streamlit.runtime.caching.cache_data_api")
    level = caching.level
    caching.setLevel(logging.ERROR)
    skipped = {"__init__", "server", *page_scripts()}
    try:
        for module in sorted(p.stem for p in APP.with_name("pages").glob("*.py") if p.stem not in skipped):
            importlib.import_module(f"pages.{module}")
    finally:
        caching.setLevel(level)


def _print_network_url(port: int) -> None:
    """The address other machines reach this one at (Streamlit no longer prints it: the app's
    config names the server address, so that it does not look its external address up online)."""
    from streamlit import net_util

    address = net_util.get_internal_ip()  # a UDP socket's own address: nothing is sent
    if address and not address.startswith("127."):
        print(f"  from another machine: http://{address}:{port}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
