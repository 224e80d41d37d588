"""Notes in markdown that paste the lines of several experiments, each under its own heading
(BigScience's tr8-104B chronicles: "## Experiment 1" ... "## Experiment 12"). A heading that names
an experiment, run, attempt or trial by its number starts a new run of the file
(:mod:`ingest.formats.segments`), whichever way the steps then go: experiment 11 at step 11,446 and
experiment 12 at step 8,738 are two runs, not a resume. Other headings (dates, topics: BLOOM's
"### 2022-04-28 sudden 5% drop in throughput") leave one run's excerpts together while the steps go
on. A step that goes back to a later step within one fenced block stays a resume from a checkpoint;
a fenced block that starts below where the one before ended is another run (MaxText's guide pastes
steps 0-9 of one run, then steps 8-9 of another on a real data set: a person pasting a resume shows
the lines that say so in the same block).

Only markdown files are looked at, and ``#`` lines inside fenced blocks (shell comments) are no
headings.

In such notes a fenced block (an excerpt) that prints the lowest step shown so far again is
another run too: BigScience's reshaping log pastes seven topologies, each resumed from the same
checkpoint and each printing iteration 94,768 first, and its prequel one ``iteration 2`` line per
TFLOPs test, each in its own block. Within one block, or in a trainer's own log, lines
at one step are one record (OLMo prints one metric per line under each ``[step=N/M]`` header).

A heading that states a configuration (``### Nodes=16 DP=1 TP=4 PP=16``) names one experiment of
a comparison, or the new setting of one run resumed on more nodes (BigScience's tr1-13B chronicles:
``## Round3 SAVE_INTERVAL=1500 NNODES=32``, its steps going on). The steps tell which: when they go
back at any such heading, each of them starts a run; when they only go on, they are one run.

A fenced block whose every line was shown before in the file is a quotation (MaxText's guide
quotes its step-9 line again to explain it): its lines are read as blank, neither a record again
nor a resume to that step."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ingest.formats.run_settings import DESCRIBED_CHANGE, is_prose, stated_settings

MARKDOWN_SUFFIXES: Final = frozenset({".md", ".markdown"})
RUN_HEADING: Final = re.compile(
    r"^#{1,6}[ \t]+(?:experiment|exp\.?|run|attempt|trial)[ \t]*#?[ \t]*[0-9]+\b", re.IGNORECASE
)
"""A heading that names one experiment by its number (``## Experiment 11``, ``### Run 3``)."""
CONFIG_HEADING: Final = re.compile(r"^#{1,6}[ \t]+[^\n]*?\b[A-Za-z][A-Za-z0-9_-]*=[0-9A-Za-z]")
"""A heading that states a setting (``### Nodes=16 DP=1``): see the module docstring."""
_FENCE: Final = re.compile(r"^[ \t]*(?:`{3,}|~{3,})")
MAX_BYTES: Final = 8 * 1024 * 1024
"""Notes larger than this are not looked at (a trainer's own log is no markdown file)."""


@dataclass(frozen=True)
class NotesMarks:
    """The 1-based line numbers of what divides markdown notes (see the module docstring)."""

    run_headings: list[int] = field(default_factory=list)
    config_headings: list[int] = field(default_factory=list)
    excerpt_starts: list[int] = field(default_factory=list)
    """Lines that open a fenced block."""
    quoted_lines: list[int] = field(default_factory=list)
    """Lines of the fenced blocks that repeat earlier lines (a quotation)."""
    settings: list[tuple[int, str, str]] = field(default_factory=list)
    """``(line, setting, value)``: the run settings the notes state (:mod:`ingest.formats.run_settings`)."""


def run_heading_lines(path: Path) -> list[int]:
    """The 1-based line numbers of ``path``'s headings that name an experiment or run (see the
    module docstring); empty for a file that is not markdown."""
    return notes_marks(path).run_headings


def notes_marks(path: Path) -> NotesMarks:
    """The run headings, configuration headings and fenced blocks of ``path``; none for a file that
    is not markdown."""
    marks = NotesMarks()
    try:
        if path.suffix.lower() not in MARKDOWN_SUFFIXES or path.stat().st_size > MAX_BYTES:
            return marks
        text = path.read_text("utf-8", errors="replace")
    except OSError:
        return marks
    fenced = False
    seen: set[str] = set()
    block: list[int] = []
    lines = text.split("\n")
    prose = []
    for number, line in enumerate(lines, start=1):
        if _FENCE.match(line):
            fenced = not fenced
            if fenced:
                marks.excerpt_starts.append(number)
                block = []
            elif block and all(lines[n - 1].strip() in seen for n in block):
                marks.quoted_lines.extend(block)
            seen.update(lines[n - 1].strip() for n in block)
            continue
        if fenced:
            if line.strip() and any(c.isdigit() for c in line):
                block.append(number)
            continue
        seen.add(line.strip())
        if is_prose(line):
            prose.append((number, DESCRIBED_CHANGE, line.strip()[:80]))
        if RUN_HEADING.match(line):
            marks.run_headings.append(number)
        elif CONFIG_HEADING.match(line):
            marks.config_headings.append(number)
    marks.settings.extend(sorted(stated_settings(lines) + prose))
    return marks


def blank_lines(chunk: bytes, first_line: int, lines: Sequence[int]) -> bytes:
    """``chunk`` (starting at 1-based line ``first_line``) with the given lines emptied, the same
    number of lines."""
    last = first_line + chunk.count(b"\n")
    inside = [n - first_line for n in lines if first_line <= n < last]
    if not inside:
        return chunk
    parts = chunk.split(b"\n")
    for index in inside:
        parts[index] = b""
    return b"\n".join(parts)
