"""StabScope: the Streamlit entry point in the source tree (``streamlit run app.py``).

The app's body is ``pages.navigation.run_app`` (``stabscope serve`` runs that module itself, which is
installed with the package; this file is not). Streamlit re-executes this script on every rerun, and
the call below runs the app each time. Pages only lay out widgets and call ``stab_core``/``ingest``; the
store lives at ``$STABSCOPE_STORE`` (default ``~/.local/share/stabscope/store``) and holds demo runs
from the first start on.
"""

from pages.navigation import run_app

run_app()
