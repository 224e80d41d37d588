"""Ask the browser for the code of a page's charts and tables before the page has data for them.

Light on purpose: app.py imports it before the pages' libraries (``pages.parts.store_access`` and the other
helpers), and only Streamlit is loaded by then.
"""

from __future__ import annotations

import streamlit as st

WARMUP_KEY = "chunk_warmup"
"""Key of the off-screen container (its CSS class is ``st-key-chunk_warmup``)."""
FIRST_SCREEN_ELEMENTS = {
    "runs": ("table",),
    "overview": ("chart",),
    "compare": ("chart", "table"),
    "ranks": ("chart", "table"),
    "spikes": ("table", "chart"),
    "scheduler": ("chart", "table"),
    "scenarios": ("chart", "table"),
}
"""The elements with a code chunk of their own (Plotly's, the largest; the table grid's) on each page's first
screen."""


def warm_up_browser(url_path: str) -> None:
    """Draw an empty table or a one-point chart off-screen for each element of the first screen of the
    page at ``url_path`` ("" is the default page, Runs).

    app.py calls this before it imports the pages' libraries, so that the browser fetches and evaluates
    the elements' code while the script imports (most of a fresh server's first run) and reads the
    store. Otherwise a chunk starts loading only when the page's real element arrives, and for
    Plotly's that wait is many times what drawing the overview's chart then takes.
    """
    elements = FIRST_SCREEN_ELEMENTS.get(url_path or "runs", ())
    if not elements:
        return
    with st.container(key=WARMUP_KEY):
        for element in elements:
            if element == "chart":
                figure = {"data": [{"type": "scatter", "x": [0], "y": [0]}], "layout": {"height": 10}}
                st.plotly_chart(figure, config={"staticPlot": True}, key="chunk_warmup_chart")
            else:
                st.dataframe({"": []}, height=40, key="chunk_warmup_table")
    st.html(f"<style>.st-key-{WARMUP_KEY}{{position:absolute;left:-10000px;width:200px}}</style>")
