"""Megatron iteration lines that a terminal or an editor wrapped over several lines (a log pasted
into notes: BigScience's chronicles), joined back into one line before the lines are matched.

The join keeps the chunk's line count: the continuation lines' text moves onto the iteration line
and blank lines take their places, so every later line keeps its number (the import report counts
the emptied lines as blank). Only files of at most :data:`PASTED_MAX_BYTES` are looked at (notes
a person pasted lines into; a trainer's own log is never wrapped), and a chunk is joined only when
it holds more iteration lines than lines ending in ``|`` (three ``bytes.count`` passes), or, in a
chunk of few iteration lines, an iteration line cut by a wrap: a line wrapped at 100 characters
cuts each record into five lines, most of them ending in ``|`` (BigScience's GPT-2 scaling notes).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

_WRAPPED_HEAD: Final = re.compile(rb"(?m)^[^\n]*\biteration[ \t]+[0-9]+/[ \t]*[0-9]+[ \t]*\|[^\n]*?[^|\s][ \t]*\n")
"""An iteration line that does not end with Megatron's closing ``|``: cut by a wrap."""
_NEW_LINE_START: Final = re.compile(rb"^[ \t]*(?:\[|iteration[ \t]+[0-9]|`{3})")
"""A line that starts a record of its own (a prefix, an iteration, a fence): never a continuation."""
_ITERATION_WORD: Final = b" iteration "
NOTES_MAX_ITERATIONS: Final = 2000
"""Chunks with more ``iteration`` words than this are a trainer's log: the search for a line cut by a
wrap (a regular expression over every line) is left out there."""
MAX_CONTINUATIONS: Final = 4
PASTED_MAX_BYTES: Final = 2 * 1024 * 1024
"""The largest file looked at for wrapped lines (BigScience's chronicles are 36-47 kB)."""


def is_pasted_size(path: Path) -> bool:
    """True when ``path`` is small enough to be notes with pasted lines (see the module docstring)."""
    try:
        return path.stat().st_size <= PASTED_MAX_BYTES
    except OSError:
        return False


def may_hold_wrapped_lines(chunk: bytes) -> bool:
    """True when ``chunk`` has more iteration lines than lines that end with ``|``, or, holding at
    most :data:`NOTES_MAX_ITERATIONS` of them (notes, not a trainer's log), one that does not end
    with ``|``."""
    iterations = chunk.count(_ITERATION_WORD)
    if iterations > chunk.count(b"|\n") + chunk.count(b"| \n"):
        return True
    return 0 < chunk.count(b"iteration") <= NOTES_MAX_ITERATIONS and _WRAPPED_HEAD.search(chunk) is not None


def join_wrapped_lines(chunk: bytes) -> bytes:
    """``chunk`` with each wrapped iteration line joined to its continuation lines (up to
    :data:`MAX_CONTINUATIONS`, until the text ends with ``|``), the same number of lines."""
    if not may_hold_wrapped_lines(chunk):
        return chunk
    out: list[bytes] = []
    pos = 0
    for m in _WRAPPED_HEAD.finditer(chunk):
        if m.start() < pos:
            continue
        joined = m.group().rstrip(b"\n")
        end = m.end()
        taken = 0
        while taken < MAX_CONTINUATIONS and not joined.rstrip().endswith(b"|"):
            nl = chunk.find(b"\n", end)
            if nl < 0:
                break
            line = chunk[end:nl]
            if not line.strip() or _NEW_LINE_START.match(line):
                break
            # a wrap inside a word ('learning\n rate') keeps the continuation's own blank
            joined += line if line[:1].isspace() else b" " + line
            end, taken = nl + 1, taken + 1
        if taken == 0 or not joined.rstrip().endswith(b"|"):
            continue  # not a wrap this can undo: left as it is (the report counts it as suspect)
        out += [chunk[pos : m.start()], joined, b"\n" * (taken + 1)]
        pos = end
    if not out:
        return chunk
    out.append(chunk[pos:])
    return b"".join(out)
