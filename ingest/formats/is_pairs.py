"""Values a console states in prose, ``<name> is <number>``, as ``key: number`` pairs for the generic reader
(:mod:`ingest.formats.record_lines` rewrites a line with this before its pairs are read)::

    Starting epoch 3 current lr is 0.001
    Epoch 3, Step 25, total used time 7.2 (s), avg loss so far is 0.1098
    Epoch 3, val loss is 0.0477, val mse is 0.0242.

The name is the words right before ``is`` (up to four, letters only, after the last comma or number): a
phrase's words joined by ``_`` (``val loss`` is ``val_loss``). ``current`` before a setting's name is no
part of it (``current lr`` is the lr), nor a trailing ``so far``, which says the value is the running
mean the console prints for the loss (``avg loss so far``: the run's loss, the only one it prints). A
sentence's full stop after the last number is dropped (it would read as part of the number).
"""

from __future__ import annotations

import re
from typing import Final

from ingest.formats.numbers import NUMBER

_IS: Final = re.compile(
    r"(?<![A-Za-z0-9_])(?P<name>[A-Za-z][A-Za-z_]*(?:[ \t]+[A-Za-z][A-Za-z_]*){0,3})[ \t]+is[ \t]+"
    r"(?P<val>" + NUMBER + r")(?:(?=[ \t]*[,;])|\.?(?=[ \t]*$))"
)
_DROPPED: Final = frozenset({"current", "the", "so", "far"})
_RUNNING: Final = frozenset({"avg", "average", "mean", "running"})


def _key(name: str) -> str:
    words = name.lower().split()
    running = words[-2:] == ["so", "far"]
    kept = [w for w in words if w not in _DROPPED]
    if running and len(kept) == 2 and kept[0] in _RUNNING:
        kept = kept[1:]  # 'avg loss so far': the running mean that stands for the loss
    return "_".join(kept)


def spelled_is(text: str) -> str:
    """``text`` with each ``<name> is <number>`` as ``<name>: <number>`` (module docstring)."""
    if " is " not in text:
        return text
    return _IS.sub(lambda m: f"{_key(m['name']) or m['name']}: {m['val']}", text)
