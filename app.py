"""StabScope: the Streamlit entry point (``stabscope serve`` or ``streamlit run app.py``).

Pages only lay out widgets and call ``stab_core``/``ingest``; the store lives at ``$STABSCOPE_STORE``
(default ``~/.local/share/stabscope/store``) and holds demo runs from the first start on.
"""

import streamlit as st

from pages.token_gate import ask_for_token, session_unlocked
from pages.warmup import warm_up_browser

st.set_page_config(page_title="StabScope", page_icon=":material/monitoring:", layout="wide")

PAGES = {
    "Runs": [
        # Served at "/"; a typed /runs is the hidden alias below (a default page's url_path is only its id)
        st.Page("pages/runs.py", title="Runs", icon=":material/table_rows:", default=True, url_path="home"),
        st.Page("pages/runs.py", title="Runs", icon=":material/table_rows:", url_path="runs", visibility="hidden"),
        st.Page("pages/upload.py", title="Upload", icon=":material/upload_file:", url_path="upload"),
    ],
    "Diagnose": [
        st.Page("pages/overview.py", title="Run overview", icon=":material/show_chart:", url_path="overview"),
        st.Page("pages/compare.py", title="Compare", icon=":material/compare_arrows:", url_path="compare"),
        st.Page("pages/ranks.py", title="Ranks", icon=":material/grid_on:", url_path="ranks"),
        st.Page("pages/spikes.py", title="Spikes", icon=":material/bolt:", url_path="spikes"),
        st.Page("pages/tree.py", title="Decision tree", icon=":material/account_tree:", url_path="tree"),
    ],
    "Plan": [
        st.Page("pages/scheduler.py", title="Scheduler", icon=":material/tune:", url_path="scheduler"),
        st.Page("pages/cost.py", title="Cost of rollback", icon=":material/payments:", url_path="cost"),
        st.Page("pages/checklist.py", title="Pre-flight checklist", icon=":material/checklist:", url_path="checklist"),
        st.Page("pages/scenarios.py", title="Scenarios", icon=":material/school:", url_path="scenarios"),
    ],
}

# The token gate comes first (pages.token_gate): a server started with a token shows a session nothing of
# the store, not even the page list in the sidebar or the live runs' banners, until it has given it.
unlocked = session_unlocked()
page = st.navigation(PAGES, position="sidebar" if unlocked else "hidden")
if not unlocked:
    ask_for_token()  # stops this run: nothing below draws
warm_up_browser(page.url_path)

# after the warm-up: these imports are most of a fresh server's first run
from pages.alert_banners import alert_banner  # noqa: E402
from pages.page_errors import errors_shown, page_fragment  # noqa: E402
from pages.store_access import LIVE_REFRESH_S, ensure_demo_runs, list_runs  # noqa: E402


def live_alerts() -> None:
    """Banners for the live runs' alerts (new spike, divergence, saturated clipping, straggler) on every page."""
    alert_banner(list_runs())


# A StabScopeError the page does not recover from ends it with one banner (pages.page_errors); any
# other exception is a bug, left to Streamlit: logged on the server, a notice without details here.
with errors_shown():
    ensure_demo_runs()
    any_live = any(r.status == "live" for r in list_runs())
    page_fragment(run_every=LIVE_REFRESH_S if any_live else None)(live_alerts)()
    page.run()
