"""Comment lines above a metrics CSV's header, and the columns of an RL Monitor file (issue #31; docs/diagnosis.md,
"Import: metrics files").

Stable-Baselines3's (and OpenAI baselines') ``Monitor`` wrapper writes one row per finished episode
under a JSON comment line::

    #{"t_start": 1700000000.5, "env_id": "CartPole-v1"}
    r,l,t
    12.0,12,0.0312

The rules, for any CSV of that shape:

- **Leading ``#`` lines are comments**, not the header, where the line after them is one: a ``#`` line
  holding a JSON object (the Monitor's), or one whose cell count differs from the next line's. A header
  that itself starts with ``#`` (``#step,loss`` over ``1,2.5``) keeps its cells and stays the header.
  A comment's JSON object (``t_start``, ``env_id``) describes the run: settings, never metrics.
- **The Monitor's columns**: a header whose first three names are ``r,l,t`` is a Monitor file; ``r``
  is the episode's return (``episode_reward``), ``l`` its length in environment steps
  (``episode_length``), ``t`` the seconds from ``t_start`` to the episode's end: a clock, no metric,
  stored as each row's wall-clock time (``t_start + t``; ``t`` alone where no ``t_start`` is stated), so
  the Cost and Spikes pages read the time per episode from it instead of saying the run logs no clock.
  It has no step column: the episode index (the row, from 0) is the axis.
"""

from __future__ import annotations

import json
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

MONITOR_COLUMNS: Final = ("r", "l", "t")
MONITOR_NAMES: Final = {"r": "episode_reward", "l": "episode_length"}
"""The Monitor's columns that are series, by the names the alias table and the analysis know."""
MONITOR_CLOCK: Final = "t"


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _cells(line: str, delimiter: str) -> int:
    return line.count(delimiter) + 1


def leading_comments(head: bytes) -> int:
    """How many of ``head``'s first lines are comments above the header (see the module)."""
    lines = [line.strip("\r") for line in head.decode("utf-8-sig", errors="replace").split("\n")]
    first = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    if first == 0 or first == len(lines):
        return 0
    after = lines[first]
    delimiter = "\t" if "\t" in after and "," not in after else ","
    n = 0
    while n < first and (
        _json_object(lines[n][1:]) is not None or _cells(lines[n], delimiter) != _cells(after, delimiter)
    ):
        n += 1
    return n


def without_comments(head: bytes) -> bytes:
    """``head`` from its header on (its leading comment lines removed)."""
    n = leading_comments(head)
    return head.split(b"\n", n)[n] if n else head


def comment_settings(head: bytes) -> dict[str, Any]:
    """The scalar fields of the JSON objects in ``head``'s leading comment lines (the Monitor's
    ``t_start``, ``env_id``)."""
    found: dict[str, Any] = {}
    lines = head.decode("utf-8-sig", errors="replace").split("\n")
    for line in lines[: leading_comments(head)]:
        found.update(
            (k, v)
            for k, v in (_json_object(line.strip("\r")[1:]) or {}).items()
            if isinstance(v, (str, int, float, bool))
        )
    return found


def is_monitor(columns: list[str]) -> bool:
    """Whether a header is an RL Monitor file's (``r,l,t`` first)."""
    return tuple(c.strip() for c in columns[:3]) == MONITOR_COLUMNS


def monitor_column(raw: str) -> tuple[str, str | None] | None:
    """A Monitor file's column as a metric (see the module): ``r``, ``l`` renamed, the clock ``t``
    none; an extra column (``info_keywords``) by its own name."""
    name = raw.strip()
    if name == MONITOR_CLOCK:
        return None
    return MONITOR_NAMES.get(name, name), None


def monitor_wall_clock(table: pa.Table, settings: dict[str, Any]) -> pa.Table:
    """A Monitor table whose clock ``t`` (s since ``t_start``) is the episode's wall-clock time in s
    since the epoch: ``t_start + t`` where the comment line states a numeric ``t_start``."""
    start = settings.get("t_start")
    if MONITOR_CLOCK not in table.column_names or isinstance(start, bool) or not isinstance(start, (int, float)):
        return table
    i = table.column_names.index(MONITOR_CLOCK)
    clock = pc.add(pc.cast(table[MONITOR_CLOCK], pa.float64(), safe=False), float(start))
    return table.set_column(i, MONITOR_CLOCK, clock)
