"""The loop of a console reader that reads one line at a time and keeps state between lines (the step
of the last training line, a pending evaluation): the reader's ``line`` callback says what a line gives;
this adds the rows and accounts for every line (:mod:`ingest.formats.accounting`).

A reader whose steps are known only once every line is read (an epoch's batch count, the largest batch
printed) hands back a provisional step and places the records in ``finish``; one that skips part of a
line itself (a garbled cell) reads the file and line number from a :class:`Where` it passes in."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import numpy as np

from ingest.formats._common import LogBuilder, iter_whole_lines

Row = tuple[str, str | None, int, float]
"""``(canonical metric, unit of the value or None, step, value)``."""
LineResult = tuple[list[Row], str | None]
"""The rows a line gives and, for a line that gives none but belongs to the log, why (else None)."""
Record = tuple[str, str | None, int, float, int]
"""A row with its sequence number (file order): ``(metric, unit, step, value, seq)``."""


@dataclass
class Where:
    """The line :func:`read_console` is handing to its reader: its file and its line number (from 1)."""

    path: Path = field(default_factory=Path)
    line: int = 0


STEP_LIMIT: Final = 2**62
"""The largest step magnitude a console row may carry (int64 with room for the post-pass's arithmetic)."""


def read_console(
    paths: Sequence[Path],
    builder: LogBuilder,
    line: Callable[[str], LineResult],
    what: str,
    *,
    whole: bool = False,
    quote_redraw: bool = False,
    where: Where | None = None,
    finish: Callable[[list[Record]], list[Record]] | None = None,
    canonical: Callable[[str, str | None], bool] | None = None,
    run_heading: Callable[[str], bool] | None = None,
) -> None:
    """Read ``paths`` in order, handing each line to ``line``; ``what`` names the format's metric line in
    the reason a line that gives nothing and is not the format's own is skipped for.

    ``line`` gets a line's last redraw (its text after the last ``\\r``: a progress bar redrawn in place),
    or the whole line as read with ``whole``. A skipped line is quoted whole, or by its last redraw with
    ``quote_redraw``. ``where``, when given, is kept at the line being handed. ``finish`` takes every
    record in file order once all lines are read and returns the records to store (steps placed,
    repeats dropped); ``canonical(metric, unit)`` says whether a metric name is canonical (default:
    all are), else :meth:`LogBuilder.add` maps it. ``run_heading(text)``: whether a line starts another launch,
    its own run (``LogBuilder.run_headings``)."""
    records: list[Record] = []
    for path in paths:
        builder.source(path)
        line_no = 1
        for chunk in iter_whole_lines(path, builder):
            lines = chunk.decode("utf-8", "replace").split("\n")[:-1]
            builder.mark_lines(line_no)
            base = builder.reserve(len(lines))
            for i, text in enumerate(lines):
                if where is not None:
                    where.path, where.line = path, line_no
                redraw = text.rstrip("\r").split("\r")[-1]
                if run_heading is not None and run_heading(text):
                    builder.run_headings.append(base + i)
                found, reason = line(text if whole else redraw)
                if not all(-STEP_LIMIT < row[2] < STEP_LIMIT for row in found):
                    found, reason = [], None  # a step no int64 holds (a mangled counter): skipped, with its line
                records += [(metric, unit, step, value, base + i) for metric, unit, step, value in found]
                shown = redraw if quote_redraw else text
                if not found and reason is None and shown.strip():
                    builder.skip(path, line_no, f"not {what}: {shown.strip()[-80:]}")
                builder.account.text_line(str(path), line_no, text, parsed=bool(found), reason=reason)
                line_no += 1
    rows: dict[tuple[str, str | None], tuple[list[int], list[float], list[int]]] = {}
    for metric, unit, step, value, seq in records if finish is None else finish(records):
        col = rows.setdefault((metric, unit), ([], [], []))
        col[0].append(step)
        col[1].append(value)
        col[2].append(seq)
    for (metric, unit), (steps, values, seqs) in rows.items():
        builder.add(
            metric,
            np.asarray(steps, np.int64),
            np.asarray(values),
            seq=np.asarray(seqs, np.int64),
            unit=unit,
            canonical=True if canonical is None else canonical(metric, unit),
        )
