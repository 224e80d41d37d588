"""Streamlit pages: layout only; the work happens in ``stab_core`` and ``ingest``.

The page scripts are the ones app.py lists in its navigation; what they share is the subpackage
``pages.parts``, each module named by purpose: ``store_access`` (the one store handle and the cached
reads), ``widgets``, ``page_errors`` (the one place errors are drawn), ``charts`` and ``rank_charts``
(the figures) with ``chart_style``, ``chart_ranges`` and ``chart_incidents``, ``series_display``,
``compare_lines``, ``run_costs``, ``incident_view``, ``alert_banners``, ``run_catalog``,
``rank_table``, ``uploads``, ``scheduler_code``, ``run_meta`` (a form), ``view_url``,
``experiment_view`` (the thesis section of Scenarios), ``warmup`` and ``token_gate`` (the shared token
asked before any page draws). Beside the scripts: ``navigation`` (the app's body, serve's main script),
``server`` (``stabscope serve``'s process, not a page) and ``access_gate`` (its middleware).

Importing this package leaves Streamlit's old pages/-folder mode if it is on, before any of the pages'
heavy libraries load: every page script imports it first, before any other import, so that a fresh
server's deep link reruns through app.py before it has waited for them.
"""


def ensure_app_navigation() -> None:
    """Leave Streamlit's old pages/-folder mode if it is on, and rerun through app.py's navigation.

    ``streamlit run app.py`` treats the folder named pages/ beside app.py as an old-style multipage app
    until app.py calls ``st.navigation`` once; a deep link (``/overview``) as a fresh server's first
    request would then run that page alone: no app.py, a sidebar of file names (common, charts...).
    The first such run switches the mode off for the whole server and starts over through app.py,
    which keeps the requested page. It happens here, in the package, so that the rerun comes before
    the page helpers' imports (``pages.parts.store_access``...) and app.py can ask the browser for Plotly's chunk first
    (``pages.parts.warmup.warm_up_browser``). (``stabscope serve`` turns the mode off before start-up.)
    """
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory:
        import streamlit as st

        PagesManager.uses_pages_directory = False
        st.rerun()


ensure_app_navigation()
