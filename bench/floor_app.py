"""Goal 6's floor: a bare Streamlit page that draws one two-point Plotly chart (``/``) or one two-row table
(``/?element=table``), nothing else.

``python -m bench`` times ``streamlit run`` of this script to its element, drawn in headless Chromium,
the same way as StabScope's pages: the server's start, Streamlit's browser bundle and the element's code
chunk, which any Streamlit dashboard pays on the machine at hand before a line of its own runs.
"""

import streamlit as st

if st.query_params.get("element") == "table":
    with st.container(key="floor_table"):
        st.dataframe({"step": [0, 1], "loss": [2.5, 2.4]})
else:
    st.plotly_chart({"data": [{"type": "scatter", "x": [0, 1], "y": [0, 1]}]}, key="floor_chart")
