"""The off-screen warm-up elements that make the browser load chart and table code early (AppTest)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest
from streamlit.testing.v1 import AppTest

from pages.server import page_scripts
from tests.conftest import REPO_ROOT


def _warm(url_path: str) -> AppTest:
    def script(path: str) -> None:
        from pages.parts.warmup import warm_up_browser

        warm_up_browser(path)

    return AppTest.from_function(script, args=(url_path,)).run()


@pytest.mark.parametrize(
    ("url_path", "charts", "tables"),
    [("", 0, 1), ("runs", 0, 1), ("overview", 1, 0), ("ranks", 1, 1), ("tree", 0, 0), ("checklist", 0, 0)],
)
def test_each_page_warms_up_what_its_first_screen_draws(url_path: str, charts: int, tables: int) -> None:
    at = _warm(url_path)
    assert not at.exception
    assert len(at.get("plotly_chart")) == charts
    assert len(at.dataframe) == tables
    styles = [e for e in at.get("html") if "st-key-chunk_warmup" in e.proto.body]
    if charts or tables:
        # one container holds them all, and CSS moves it off-screen out of the layout's flow
        assert [b.key for b in at.main if getattr(b, "key", None) == "chunk_warmup"] == ["chunk_warmup"]
        assert len(styles) == 1 and "position:absolute" in styles[0].proto.body
    else:
        assert not styles  # nothing on the page at all


def test_the_warm_up_chart_is_a_real_one_point_figure() -> None:
    at = _warm("overview")
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert [(t["x"], t["y"]) for t in spec["data"]] == [([0], [0])]
    assert json.loads(at.get("plotly_chart")[0].proto.config)["staticPlot"] is True


def test_app_warms_up_before_it_imports_the_pages_libraries() -> None:
    """The gain is the overlap with the page helpers' imports: the call must come before all of them
    (the app's module, pages/navigation.py, at import and then in ``run_app``, which app.py calls)."""
    tree = ast.parse((REPO_ROOT / "pages" / "navigation.py").read_text())
    run_app = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run_app")
    helper_imports, warm = [], None
    for node in [*tree.body, *run_app.body]:
        if (
            isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith("pages.")
            # all three light (token gate: #23; the preload's module: threading and sockets, tested below)
            and node.module not in ("pages.parts.warmup", "pages.parts.token_gate", "pages.parts.first_screen_preload")
        ):
            helper_imports.append(node.lineno)
        call = node.value if isinstance(node, ast.Expr) else None
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "warm_up_browser":
            warm = node.lineno
    assert warm is not None and helper_imports and warm < min(helper_imports)


def test_the_warm_up_module_loads_none_of_the_pages_libraries() -> None:
    """Nor does the preload's module, which app.py imports beside it: it imports them only on its thread."""
    heavy = [
        "pandas",
        "pyarrow",
        "duckdb",
        "ingest",
        "stab_core",
        "pages.parts.store_access",
        "pages.parts.page_errors",
    ]
    code = (
        "import sys, pages.parts.warmup, pages.parts.first_screen_preload; "
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


PAGE_SCRIPTS = page_scripts()

_OLD_MODE_RUN = """
import runpy, sys
import streamlit as st
from streamlit.runtime.pages_manager import PagesManager

class Rerun(Exception):
    pass

def rerun(*args, **kwargs):
    raise Rerun

st.rerun = rerun
PagesManager.uses_pages_directory = True  # a fresh `streamlit run` server, deep link to this page
before = set(sys.modules)
try:
    runpy.run_path(sys.argv[1], run_name="__main__")
except Rerun:
    heavy = ["pandas", "pyarrow", "duckdb", "numpy", "ingest", "stab_core", "pages.parts.store_access"]
    print(sorted(m for m in heavy if m in sys.modules and m not in before))
else:
    print("no rerun")
"""


@pytest.mark.parametrize("page", PAGE_SCRIPTS)
def test_a_deep_link_reruns_into_app_before_the_pages_libraries_load(page: str) -> None:
    """A fresh server runs a deep-linked page alone (Streamlit's pages/ mode) until the ``pages``
    package switches that off and reruns through app.py. Each page imports the package first, so that
    rerun costs nothing: a page that imported ``ingest.store`` first made the browser wait for it
    before app.py could ask for Plotly's chunk (goal 6 of the bench measures the first render)."""
    assert len(PAGE_SCRIPTS) == 11
    out = subprocess.run(
        [sys.executable, "-c", _OLD_MODE_RUN, str(REPO_ROOT / "pages" / f"{page}.py")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "[]", out.stderr[-2000:]
