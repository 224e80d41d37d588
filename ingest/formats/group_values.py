"""A value printed as a list of one number per optimizer parameter group, as the generic reader takes
it (:mod:`ingest.formats.record_lines`).

An optimizer holds one learning rate per parameter group, and a console that prints the scheduler's
``get_last_lr()`` or DeepSpeed's ``lr=[5e-05, 5e-05]`` prints them all. The run's learning rate is the
first group's (the groups are listed in the optimizer's order: the first is the model's main weights,
the rest a no-decay or head group that follows the same schedule). So:

- a learning rate's list (``lr=[a, b]``, ``LR [a]``, ``learning_rate: [a, b, c]``; any separator) is
  its first item;
- any key's one-item list after ``=`` (``mom=[0.9]``) is its item, as after ``:`` already.

Lists of several numbers under any other name (``shape=[4, 128]``, ``mom=[(0.9, 0.95)]``) are left as
they are: they are no per-step measurement.
"""

from __future__ import annotations

import re
from typing import Final

from ingest.formats.aliases import normalise_key
from ingest.formats.numbers import NUMBER

_LIST: Final = re.compile(
    r"(?<![A-Za-z0-9_.])(?P<key>[A-Za-z_][A-Za-z0-9_]*(?:[ \t]+rate)?)(?P<sep>[ \t]*[:=][ \t]*|[ \t]+)"
    r"\[[ \t]*(?P<first>" + NUMBER + r")[ \t]*(?P<rest>(?:,[ \t]*" + NUMBER + r"[ \t]*)*)\](?![\[(])"
)
_LR_NAMES: Final = frozenset({"lr", "learning rate", "learning_rate"})


def _first(m: re.Match[str]) -> str:
    key, sep = m["key"], m["sep"]
    if normalise_key(key) in _LR_NAMES:
        return f"{key}: {m['first']}"
    if not m["rest"] and "=" in sep:
        return f"{key}{sep}{m['first']}"
    return m[0]


def group_values(text: str) -> str:
    """``text`` with each learning rate's per-group list as its first item, and a one-item list after
    ``=`` as its item."""
    if "[" not in text:
        return text
    return _LIST.sub(_first, text)
