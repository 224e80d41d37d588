"""StabScope: the Streamlit entry point in the source tree (``streamlit run app.py``).

The app's body is ``pages.navigation.run_app`` (``stabscope serve`` runs that module itself, which is
installed with the package; this file is not). Pages only lay out widgets and call ``stab_core``/``ingest``;
the store lives at ``$STABSCOPE_STORE`` (default ``~/.local/share/stabscope/store``) and holds demo runs
from the first start on.

``streamlit run app.py`` imports this file to find its server: the ``st.App`` below, whose main script
is pages/navigation.py and which puts the same access gate as ``stabscope serve`` (``pages.access_gate``)
in front of every route. Where this file runs as a script instead (``AppTest.from_file("app.py")``, or
an older Streamlit), it runs the app's body, once per rerun.
"""

import streamlit as st
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

from pages.navigation import run_app

if get_script_run_ctx(suppress_warning=True) is None:  # imported to start the server
    from pages.server import development_gate

    app = st.App("pages/navigation.py", middleware=development_gate())
else:
    run_app()
