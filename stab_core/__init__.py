"""StabScope's pure analytics library: numpy/torch in, numbers and dataclasses out.

No Streamlit, no DuckDB, no file I/O lives here (a subprocess test enforces it).
"""
