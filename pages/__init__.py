"""Streamlit pages: layout only; the work happens in ``stab_core`` and ``ingest``.

Importing this package leaves Streamlit's old pages/-folder mode if it is on, before any of the pages'
heavy libraries load: every page script imports it first, before any other import (a page that
imported ``ingest.store`` first made a fresh server's deep link 0.3 s slower).
"""


def ensure_app_navigation() -> None:
    """Leave Streamlit's old pages/-folder mode if it is on, and rerun through app.py's navigation.

    ``streamlit run app.py`` treats the folder named pages/ beside app.py as an old-style multipage app
    until app.py calls ``st.navigation`` once; a deep link (``/overview``) as a fresh server's first
    request would then run that page alone: no app.py, a sidebar of file names (common, charts...).
    The first such run switches the mode off for the whole server and starts over through app.py,
    which keeps the requested page. It happens here, in the package, so that the rerun comes before
    the ~0.8 s of imports in ``pages.common`` and app.py can ask the browser for Plotly's chunk first
    (``pages.warmup.warm_up_browser``). (``stabscope serve`` turns the mode off before start-up.)
    """
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory:
        import streamlit as st

        PagesManager.uses_pages_directory = False
        st.rerun()


ensure_app_navigation()
