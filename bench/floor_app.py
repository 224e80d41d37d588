"""Goal 6's floor: a bare Streamlit page that draws one two-point Plotly chart, nothing else.

``python -m bench`` times ``streamlit run`` of this script to its chart, drawn in headless Chromium, the
same way as the overview: the server's start, Streamlit's browser bundle and Plotly's chunk, which any
Streamlit + Plotly dashboard pays on the machine at hand before a line of its own runs.
"""

import streamlit as st

st.plotly_chart({"data": [{"type": "scatter", "x": [0, 1], "y": [0, 1]}]}, key="floor_chart")
