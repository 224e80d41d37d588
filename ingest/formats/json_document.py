"""A JSON document (not JSON Lines) that holds its training log as a list of per-step objects
somewhere inside it: PEFT's method-comparison results (``{"run_info": {...}, "train_info":
{"metrics": [{"step": 5, "loss": ...}, ...]}}``), a results file an ad-hoc script dumps with
``json.dump``. The list is read as if each object were one line of a JSON Lines log; the rest of the
document (settings, totals, versions) is no step's record.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from ingest.formats._common import LogBuilder
from ingest.formats._tabular import _python_json

MAX_DOCUMENT_BYTES = 32 * 1024 * 1024
"""A document is parsed whole: larger JSON files are left to the line-by-line readers."""
_MAX_DEPTH = 6


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
    return best


def _object_lists(value: Any, depth: int) -> Iterator[list[dict[str, Any]]]:
    if depth > _MAX_DEPTH:
        return
    children: list[Any] = []
    if isinstance(value, dict):
        # the HF trainer state's log_history has its own reader (which knows its train/eval records)
        children = [v for k, v in value.items() if k != "log_history"]
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
    """The records as one table of flattened objects (the JSON Lines reader's columns), line 1."""
    builder.advance(path.stat().st_size)
    lines = b"\n".join(json.dumps(r).encode() for r in records)
    yield _python_json(lines, path, 1, builder), 1
