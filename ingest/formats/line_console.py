"""The loop of a console reader that reads one line at a time and keeps state between lines (the step
of the last training line, a pending evaluation): the reader's ``line`` callback says what a line gives;
this adds the rows and accounts for every line (:mod:`ingest.formats.accounting`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ingest.formats._common import LogBuilder, iter_whole_lines

Row = tuple[str, str | None, int, float]
"""``(canonical metric, unit of the value or None, step, value)``."""
LineResult = tuple[list[Row], str | None]
"""The rows a line gives and, for a line that gives none but belongs to the log, why (else None)."""


def read_console(paths: Sequence[Path], builder: LogBuilder, line: Callable[[str], LineResult], what: str) -> None:
    """Read ``paths`` in order, handing each line to ``line``; ``what`` names the format's metric line in
    the reason a line that gives nothing and is not the format's own is skipped for."""
    rows: dict[tuple[str, str | None], tuple[list[int], list[float], list[int]]] = {}
    for path in paths:
        builder.source(path)
        line_no = 1
        for chunk in iter_whole_lines(path, builder):
            lines = chunk.decode("utf-8", "replace").split("\n")[:-1]
            builder.mark_lines(line_no)
            base = builder.reserve(len(lines))
            for i, text in enumerate(lines):
                found, reason = line(text.rstrip("\r").split("\r")[-1])
                for metric, unit, step, value in found:
                    col = rows.setdefault((metric, unit), ([], [], []))
                    col[0].append(step)
                    col[1].append(value)
                    col[2].append(base + i)
                if not found and reason is None and text.strip():
                    builder.skip(path, line_no, f"not {what}: {text.strip()[-80:]}")
                builder.account.text_line(str(path), line_no, text, parsed=bool(found), reason=reason)
                line_no += 1
    for (metric, unit), (steps, values, seq) in rows.items():
        builder.add(
            metric,
            np.asarray(steps, np.int64),
            np.asarray(values),
            seq=np.asarray(seq, np.int64),
            unit=unit,
            canonical=True,
        )
