"""The import report kept in a run's meta (``meta['import_report']``, written by
:func:`ingest.formats.accounting.import_report`), read back for the analyses and the pages. Here, not in
``ingest.formats``: importing any module of that package loads every log reader, which the Runs page's
first screen must not pay for (tests/test_import_hygiene.py)."""

from __future__ import annotations

from typing import Any


def suspect_lines(meta: Any) -> list[tuple[int, str]]:
    """(line, text) of the suspect lines a run's ``meta['import_report']`` quotes (its ``suspect`` examples);
    empty without a report. What :func:`stab_core.metrics.unread_line_naming` reads, so that the analysis
    never parses this report's layout."""
    report = meta.get("import_report") if isinstance(meta, dict) else None
    suspect = report.get("suspect") if isinstance(report, dict) else None
    examples = suspect.get("examples") if isinstance(suspect, dict) else None
    if not isinstance(examples, list):
        return []
    return [(int(e.get("line", 0) or 0), str(e.get("text", ""))) for e in examples if isinstance(e, dict)]
