"""The import report as the Upload preview and a run's overview show it: one line, a warning naming
the suspect lines, and the details in an expander (see :mod:`ingest.formats.accounting`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

from ingest.formats.accounting import summary_line, suspect_warning


def show_import_report(report: dict[str, Any] | None, key: str) -> None:
    """Draw ``report`` (``LineAccount.to_json``, or a run's ``meta['import_report']``); nothing for
    None (a run that was not imported, or imported before the report existed)."""
    if not report:
        return
    st.caption(f"Import: {summary_line(report)}.")
    warning = suspect_warning(report)
    if warning:
        st.warning(f"Import: {warning}.", icon=":material/report:")
    suspect = report.get("suspect") or {}
    ignored = report.get("ignored") or {}
    if not suspect.get("count") and not ignored:
        return
    with st.expander("Suspect and ignored lines" if suspect.get("count") else "Ignored lines", expanded=False):
        if suspect.get("count"):
            st.markdown(f"**Suspect lines** ({suspect['count']:,}): " + ", ".join(map(str, suspect.get("lines", []))))
            examples = pd.DataFrame(suspect.get("examples") or [], columns=["file", "line", "text"])
            examples["file"] = examples["file"].map(lambda f: Path(str(f)).name)  # no staging or home path
            st.dataframe(examples, hide_index=True, key=f"{key}_suspect")
        rows = [
            {"reason": reason, "lines": tally["count"], "first": ", ".join(map(str, tally.get("first_lines", [])))}
            for reason, tally in ignored.items()
        ]
        if rows:
            st.dataframe(pd.DataFrame(rows), hide_index=True, key=f"{key}_ignored")
