"""The import report as the Upload preview and a run's overview show it: one line, a warning naming
the suspect lines, and the details in an expander (see :mod:`ingest.formats.accounting`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
    # text, not tables: the preview's tables keep their places (and their index in tests)
    with st.expander("Suspect and ignored lines" if suspect.get("count") else "Ignored lines", expanded=False):
        if suspect.get("count"):
            st.markdown(f"**Suspect lines** ({suspect['count']:,}): " + ", ".join(map(str, suspect.get("lines", []))))
            shown = [f"{Path(str(e['file'])).name}:{e['line']}: {e['text']}" for e in suspect.get("examples") or []]
            if shown:  # the file's name only: no staging or home path
                st.code("\n".join(shown), language=None, wrap_lines=True)
        reasons = [
            f"- **{reason}**: {tally['count']:,} (first: {', '.join(map(str, tally.get('first_lines', []))) or '-'})"
            for reason, tally in ignored.items()
        ]
        if reasons:
            st.markdown("**Ignored**, by reason:\n" + "\n".join(reasons))
