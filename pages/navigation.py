"""The app itself: page list, token gate, warm-up, error guard and the page (``run_app``).

Streamlit re-executes its main script on every rerun, and a module is imported only once, so the main
script calls :func:`run_app` each time: ``app.py`` in the source tree (``streamlit run app.py``), and
this very file under ``stabscope serve``, run as ``__main__``. This file exists wherever the ``pages``
package is installed (a wheel has no top-level app.py), and the page scripts are given by absolute
paths next to it, so the app does not depend on the directory its main script lies in. (Streamlit puts
the main script's folder first on sys.path, so under serve no module here may be named like a standard
or installed one: tests/test_wheel_install.py checks it.)

Light at import on purpose: only Streamlit and the three light helpers (``pages.parts.token_gate``,
``pages.parts.warmup``, ``pages.parts.first_screen_preload``); the page helpers are imported inside
:func:`run_app`, after the warm-up (under ``stabscope serve``, preloaded meanwhile).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import streamlit as st

from pages.parts.first_screen_preload import wait as wait_for_preload
from pages.parts.token_gate import ask_for_token, session_unlocked
from pages.parts.warmup import warm_up_browser

PAGES_DIR = Path(__file__).resolve().parent
"""The folder of the page scripts (this package's folder, in the source tree or in site-packages)."""


class PageEntry(NamedTuple):
    """One entry of the navigation: the page script ``pages/<script>.py`` and how it is listed."""

    script: str
    title: str
    icon: str
    url_path: str
    default: bool = False
    hidden: bool = False


NAVIGATION: dict[str, list[PageEntry]] = {
    "Runs": [
        # Served at "/"; a typed /runs is the hidden alias below (a default page's url_path is only its id)
        PageEntry("runs", "Runs", ":material/table_rows:", "home", default=True),
        PageEntry("runs", "Runs", ":material/table_rows:", "runs", hidden=True),
        PageEntry("upload", "Upload", ":material/upload_file:", "upload"),
    ],
    "Diagnose": [
        PageEntry("overview", "Run overview", ":material/show_chart:", "overview"),
        PageEntry("compare", "Compare", ":material/compare_arrows:", "compare"),
        PageEntry("ranks", "Ranks", ":material/grid_on:", "ranks"),
        PageEntry("spikes", "Spikes", ":material/bolt:", "spikes"),
        PageEntry("tree", "Decision tree", ":material/account_tree:", "tree"),
    ],
    "Plan": [
        PageEntry("scheduler", "Scheduler", ":material/tune:", "scheduler"),
        PageEntry("cost", "Cost of rollback", ":material/payments:", "cost"),
        PageEntry("checklist", "Pre-flight checklist", ":material/checklist:", "checklist"),
        PageEntry("scenarios", "Scenarios", ":material/school:", "scenarios"),
    ],
}
"""The sidebar's sections and their pages, in order."""


def page_scripts() -> list[str]:
    """The page scripts the navigation lists (``runs``, ``upload``...), sorted: the other modules of
    pages/ are the helpers they import. A page script draws when it runs, so it is never imported ahead."""
    return sorted({entry.script for entries in NAVIGATION.values() for entry in entries})


def _page(entry: PageEntry) -> st.Page:
    """The ``st.Page`` of one entry, its script by absolute path."""
    return st.Page(
        PAGES_DIR / f"{entry.script}.py",
        title=entry.title,
        icon=entry.icon,
        url_path=entry.url_path,
        default=entry.default,
        visibility="hidden" if entry.hidden else "visible",
    )


def run_app() -> None:
    """One run of the app for a browser session: what a main script does on every rerun."""
    st.set_page_config(page_title="StabScope", page_icon=":material/monitoring:", layout="wide")
    pages = {section: [_page(entry) for entry in entries] for section, entries in NAVIGATION.items()}
    # The token gate comes first (pages.parts.token_gate): a server started with a token shows a session nothing
    # of the store, not even the page list in the sidebar or the live runs' banners, until it has given it.
    unlocked = session_unlocked()
    page = st.navigation(pages, position="sidebar" if unlocked else "hidden")
    if not unlocked:
        ask_for_token()  # stops this run: nothing below draws
    # under stabscope serve, a thread has been importing the libraries below since the server listened:
    # wait for it before anything here imports one (the warm-up's table loads pandas)
    wait_for_preload()
    warm_up_browser(page.url_path)

    # after the warm-up: these imports are most of a fresh server's first run
    from pages.parts.alert_banners import alert_banner
    from pages.parts.page_errors import errors_shown, page_fragment
    from pages.parts.store_access import LIVE_REFRESH_S, ensure_demo_runs, list_runs

    def live_alerts() -> None:
        """Banners for the live runs' alerts (new spike, divergence, saturated clipping, straggler) on every page."""
        alert_banner(list_runs())

    # A StabScopeError the page does not recover from ends it with one banner (pages.parts.page_errors); any
    # other exception is a bug, left to Streamlit: logged on the server, a notice without details here.
    with errors_shown():
        ensure_demo_runs()
        any_live = any(r.status == "live" for r in list_runs())
        page_fragment(run_every=LIVE_REFRESH_S if any_live else None)(live_alerts)()
        page.run()


if __name__ == "__main__":  # `stabscope serve` runs this file as Streamlit's main script (pages.server.APP)
    run_app()
