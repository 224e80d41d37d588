"""JSON documents of scalar series that name no step key per record:

- **TensorBoard's JSON download** (a scalar chart's "JSON" link): ``[[wall time, step, value], ...]``
  for one tag; the tag is named only by the file name (``run-<run>-tag-<tag>.json``, as its CSV
  download, :func:`ingest.formats.tensorboard_csv.tag_of`).
- **Sacred's ``metrics.json``** (the FileStorageObserver's run folder): ``{"<name>": {"steps": [...],
  "values": [...], "timestamps": ["2024-01-01T00:00:00.000000", ...]}, ...}``, one entry per logged
  name (``train.loss``: Sacred's dotted names are read as ``train/loss``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ingest.errors import StabScopeError
from ingest.formats._common import LogBuilder
from ingest.formats.aliases import canonical_name
from ingest.formats.base import Reader
from ingest.formats.json_document import MAX_DOCUMENT_BYTES
from ingest.formats.table_runs import TableRuns
from ingest.formats.tensorboard_csv import tag_of


def _load(path: Path) -> Any:
    try:
        if not path.is_file() or path.stat().st_size > MAX_DOCUMENT_BYTES:
            return None
        return json.loads(path.read_bytes().decode("utf-8-sig", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return None


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def is_triples(doc: Any) -> bool:
    """Whether ``doc`` is TensorBoard's JSON download: a list of ``[wall, step, value]`` numbers."""
    return (
        isinstance(doc, list)
        and len(doc) > 0
        and all(isinstance(r, list) and len(r) == 3 and _number(r[0]) and _number(r[1]) for r in doc)
    )


def sacred_series(doc: Any) -> dict[str, dict[str, Any]]:
    """The entries of a Sacred ``metrics.json`` (each with equal-length ``steps`` and ``values``)."""
    if not isinstance(doc, dict):
        return {}
    out = {}
    for name, entry in doc.items():
        if not isinstance(entry, dict):
            return {}
        steps, values = entry.get("steps"), entry.get("values")
        if not isinstance(steps, list) or not isinstance(values, list) or len(steps) != len(values):
            return {}
        out[str(name)] = entry
    return out


def _stamp(text: Any) -> float:
    if _number(text):
        return float(text)
    try:
        return datetime.fromisoformat(str(text)).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return math.nan


def _value(x: Any) -> float:
    if _number(x):
        return float(x)
    try:
        return float(x)  # "NaN", "Infinity" as Sacred's JSON encoder may write them
    except (TypeError, ValueError):
        return math.nan


class ScalarJsonReader(Reader):
    name = "scalar_json"
    description = "TensorBoard JSON download '[[wall, step, value], ...]' or Sacred metrics.json"

    def sniff(self, head: bytes, path: Path) -> float:
        start = head.lstrip()[:2]
        if start == b"[[":
            return 0.9 if is_triples(_load(path)) else 0.0
        if start[:1] == b"{" and b'"steps"' in head and b'"values"' in head:
            return 0.9 if sacred_series(_load(path)) else 0.0
        return 0.0

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        for stream, path in enumerate(paths):
            builder.source(path)
            doc = _load(path)
            builder.advance(path.stat().st_size)
            if is_triples(doc):
                rows = [r for r in doc if _number(r[1]) and math.isfinite(r[1])]
                steps = np.array([r[1] for r in rows], np.float64)
                # ingest.formats.table_runs: a relaunch that restarts the step is another run
                for run in TableRuns(builder, stream).split_steps(steps):
                    builder.add(
                        tag_of(path),
                        steps[run].astype(np.int64),
                        np.array([_value(r[2]) for r in rows[run]]),
                        wall_time=np.array([float(r[0]) for r in rows[run]]),
                        stream=stream,
                    )
                continue
            series = sacred_series(doc)
            if not series:
                raise StabScopeError(
                    "expected one JSON document: [[wall, step, value], ...] or Sacred's metrics.json",
                    path=str(path),
                    line=1,
                )
            for name, entry in series.items():
                stamps = entry.get("timestamps")
                wall = (
                    [_stamp(t) for t in stamps]
                    if isinstance(stamps, list) and len(stamps) == len(entry["steps"])
                    else None
                )
                keep = [i for i, s in enumerate(entry["steps"]) if _number(s) and math.isfinite(s)]
                metric, unit = canonical_name(name.replace(".", "/"))
                builder.add(
                    metric,
                    np.array([entry["steps"][i] for i in keep], np.int64),
                    np.array([_value(entry["values"][i]) for i in keep]),
                    wall_time=None if wall is None else np.array([wall[i] for i in keep]),
                    stream=stream,
                    unit=unit,
                    canonical=True,
                    origin=name,
                )
