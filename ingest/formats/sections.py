"""Notes in markdown that paste the lines of several experiments, each under its own heading
(BigScience's tr8-104B chronicles: "## Experiment 1" ... "## Experiment 12"). A heading that names
an experiment, run, attempt or trial by its number starts a new run of the file
(:mod:`ingest.formats.segments`), whichever way the steps then go: experiment 11 at step 11,446 and
experiment 12 at step 8,738 are two runs, not a resume. Other headings (dates, topics: BLOOM's
"### 2022-04-28 sudden 5% drop in throughput") leave one run's excerpts together, and a step that
goes back to a later step without such a heading stays a resume from a checkpoint.

Only markdown files are looked at, and ``#`` lines inside fenced blocks (shell comments) are no
headings.

In such notes a fenced block (an excerpt) that prints the lowest step shown so far again is
another run too: BigScience's reshaping log pastes seven topologies, each resumed from the same
checkpoint and each printing iteration 94,768 first, and its prequel one ``iteration 2`` line per
TFLOPs test, each in its own block. Within one block, or in a trainer's own log, lines at one step
are one record (OLMo prints one metric per line under each ``[step=N/M]`` header)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

MARKDOWN_SUFFIXES: Final = frozenset({".md", ".markdown"})
RUN_HEADING: Final = re.compile(
    r"^#{1,6}[ \t]+(?:experiment|exp\.?|run|attempt|trial)[ \t]*#?[ \t]*[0-9]+\b", re.IGNORECASE
)
"""A heading that names one experiment by its number (``## Experiment 11``, ``### Run 3``)."""
_FENCE: Final = re.compile(r"^[ \t]*(?:`{3,}|~{3,})")
MAX_BYTES: Final = 8 * 1024 * 1024
"""Notes larger than this are not looked at (a trainer's own log is no markdown file)."""


def run_heading_lines(path: Path) -> list[int]:
    """The 1-based line numbers of ``path``'s headings that name an experiment or run (see the
    module docstring); empty for a file that is not markdown."""
    return notes_marks(path)[0]


def notes_marks(path: Path) -> tuple[list[int], list[int]]:
    """The 1-based line numbers of ``path``'s run headings and of the lines that open a fenced
    block (each an excerpt, see the module docstring); both empty for a file that is not markdown."""
    try:
        if path.suffix.lower() not in MARKDOWN_SUFFIXES or path.stat().st_size > MAX_BYTES:
            return [], []
        text = path.read_text("utf-8", errors="replace")
    except OSError:
        return [], []
    headings: list[int] = []
    excerpts: list[int] = []
    fenced = False
    for number, line in enumerate(text.split("\n"), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            if fenced:
                excerpts.append(number)
        elif not fenced and RUN_HEADING.match(line):
            headings.append(number)
    return headings, excerpts
