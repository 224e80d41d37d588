"""A JSON document (not JSON Lines) that holds its training log as a list of per-step objects
somewhere inside it: PEFT's method-comparison results (``{"run_info": {...}, "train_info":
{"metrics": [{"step": 5, "loss": ...}, ...]}}``), a results file an ad-hoc script dumps with
``json.dump``. The list is read as if each object were one line of a JSON Lines log; the rest of the
document (settings, totals, versions) is no step's record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from ingest.formats._common import LogBuilder
from ingest.formats._tabular import STEP_COLUMNS, _python_json, find_column
from ingest.formats.json_rows import number_text, row_records
from ingest.formats.table_runs import TableRuns

MAX_DOCUMENT_BYTES = 32 * 1024 * 1024
"""A document is parsed whole: larger JSON files are left to the line-by-line readers."""
_MAX_DEPTH = 6
_MACHINE = re.compile(r"time|mem", re.IGNORECASE)


def looks_like_document(head: bytes) -> bool:
    """Whether ``head`` opens a JSON object or array (a document, or a JSON Lines log)."""
    return head.lstrip()[:1] in (b"{", b"[")


def step_records(path: Path) -> list[dict[str, Any]] | None:
    """The longest list of per-step objects (two or more objects with a number each) in the JSON
    document at ``path``; None when the file is not one JSON document or holds no such list."""
    try:
        if path.stat().st_size > MAX_DOCUMENT_BYTES:
            return None
        doc = json.loads(path.read_bytes().decode("utf-8-sig", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return None  # JSON Lines (a second object after the first), or not JSON
    best: list[dict[str, Any]] | None = None
    for records in _object_lists(doc, 0):
        if best is None or len(records) > len(best):
            best = records
    return best or series_records(doc) or keyed_records(doc) or row_records(doc, path)  # ingest.formats.json_rows


def keyed_records(doc: Any) -> list[dict[str, Any]] | None:
    """Per-step records from an object keyed by step (NeMo Megatron-Bridge's golden values: ``{"0": {"lm loss":
    11.9, "elapsed time per iteration (ms)": 53048.6}, "1": {...}, "alloc": 81.9}``): each key that is a whole
    number and holds an object with a number is that step's record. Two or more such keys, and more than half of
    the document's keys, are needed; the other keys (run-level totals such as peak memory) are no step's record.
    None for any other document."""
    if not isinstance(doc, dict):
        return None
    records = [
        {"step": int(key), **value}
        for key, value in doc.items()
        if isinstance(key, str)
        and key.strip().isdigit()
        and isinstance(value, dict)
        and "step" not in value
        and any(_is_number(v) for v in value.values())
    ]
    if len(records) < 2 or 2 * len(records) <= len(doc):
        return None
    return sorted(records, key=lambda r: int(r["step"]))


def series_records(doc: Any) -> list[dict[str, Any]] | None:
    """Per-step records from a document of per-metric series (docs/diagnosis.md, "Import: metrics files"): an object
    whose keys are metric names and whose values map step numbers to values, directly (``{"loss": {"1": 2.3, "5":
    2.1}}``) or under one key beside the series' own settings (``{"loss": {"start_step": 1,
    "step_interval": 5, "values": {"1": 2.3, ...}}}``). Two or more steps over the metrics are needed;
    None for any other document."""
    if not isinstance(doc, dict):
        return None
    by_step: dict[int, dict[str, Any]] = {}
    for name, value in doc.items():
        series = _step_map(value)
        if series is None and isinstance(value, dict):
            inner = [m for v in value.values() if (m := _step_map(v)) is not None]
            series = inner[0] if len(inner) == 1 else None
        if series is None:
            continue
        for step, number in series.items():
            by_step.setdefault(step, {"step": step})[name] = number
    # a step where every series is NaN, a machine measure (time, memory) among them, was not recorded:
    # a diverged step still took time and memory (Megatron's golden values write "nan" for such steps)
    kept = [r for _, r in sorted(by_step.items()) if not _placeholder(r)]
    return kept if len(kept) >= 2 else None


def _placeholder(record: dict[str, Any]) -> bool:
    values = {k: v for k, v in record.items() if k != "step"}
    if len(values) < 2 or not any(_MACHINE.search(k) for k in values):
        return False
    return all((isinstance(v, str) and v.strip().lower() == "nan") or v != v for v in values.values())


def _step_map(value: Any) -> dict[int, Any] | None:
    """``{step: value}`` when ``value`` is an object whose every key is a whole number (two or more)
    and whose values are numbers or number strings (``"nan"``); else None."""
    if not isinstance(value, dict) or len(value) < 2:
        return None
    out: dict[int, Any] = {}
    for key, item in value.items():
        if not (isinstance(key, str) and key.strip().isdigit()):
            return None
        if not (_is_number(item) or (isinstance(item, str) and number_text(item))):
            return None  # a label map ({"0": "neg", "1": "pos"}) is no series
        out[int(key)] = item
    return out


def _object_lists(value: Any, depth: int) -> Iterator[list[dict[str, Any]]]:
    if depth > _MAX_DEPTH:
        return
    children: list[Any] = []
    if isinstance(value, dict):
        children = list(value.values())
    elif isinstance(value, list):
        objects = [v for v in value if isinstance(v, dict) and any(_is_number(x) for x in v.values())]
        if len(objects) >= 2 and len(objects) * 2 > len(value):
            yield objects
            return
        children = value
    for child in children:
        if isinstance(child, (dict, list)):
            yield from _object_lists(child, depth + 1)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def document_tables(path: Path, records: list[dict[str, Any]], builder: LogBuilder) -> Iterator[tuple[pa.Table, int]]:
    """The records as a table of flattened objects (the JSON Lines reader's columns), line 1; one table
    per run when the step goes back to its first value (a relaunch: :mod:`ingest.formats.table_runs`)."""
    builder.advance(path.stat().st_size)
    lines = b"\n".join(json.dumps(r).encode() for r in records)
    table = _python_json(lines, path, 1, builder)
    step_col = find_column(table.column_names, STEP_COLUMNS)
    for run in TableRuns(builder).split(table, step_col) if step_col else [table]:
        yield run, 1
