"""Pages run the way a browser session runs them: app.py with the page selected (its navigation, the
live runs' banners and the one error guard around ``page.run()``), not the page script alone."""

from __future__ import annotations

import pytest
import streamlit.testing.v1.app_test as app_test_module
from streamlit.runtime.pages_manager import PagesManager
from streamlit.testing.v1 import AppTest

from tests.conftest import REPO_ROOT


class _NavigationOnly(PagesManager):
    """AppTest's pages manager, kept from taking the pages/ folder beside app.py for an old-style app."""


def open_in_app(page: str, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    """An AppTest of app.py showing ``pages/<page>.py`` (call ``.run()``); no demo runs are seeded.

    Before each run AppTest asks afresh whether a pages/ folder sits beside the script and, since one
    does, would run the selected page alone, as Streamlit's old pages/ mode does. A server never does:
    app.py's ``st.navigation`` turns that mode off (and ``pages.ensure_app_navigation`` on a fresh
    server's deep link). So the question is answered "no" here, for this test only.
    """
    monkeypatch.setenv("STABSCOPE_NO_DEMO", "1")
    monkeypatch.setattr(app_test_module, "PagesManager", _NavigationOnly)
    monkeypatch.setattr(PagesManager, "uses_pages_directory", False)
    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=30)
    at.switch_page(f"pages/{page}.py")
    return at
