"""Streamlit pages: layout only; the work happens in ``stab_core`` and ``ingest``."""
