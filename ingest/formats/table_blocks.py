"""A record printed as a framed table of one ``| name | value |`` row per metric, as the generic reader
takes it (:mod:`ingest.formats.record_lines`).

A logger that dumps its key/value store every few iterations (an RL library's, a hand-written one)
prints each dump as a table between two dashed rules::

    ---------------------------------
    | rollout/           |          |
    |    ep_rew_mean     | 0.25     |
    | train/             |          |
    |    loss            | 0.0123   |
    |    total_timesteps | 4096     |
    ---------------------------------

The rows between two rules are one record, read as ``name: value, ...`` on the opening rule's line. A row
with no value is a section heading; a row's name is its last part (``train/loss`` and ``loss`` under
``train/`` are ``loss``), so the trainer's names meet the alias table; where two rows of a table share
that last part both keep their sections (``rollout/episodes`` beside ``total/episodes``). A name cut
short by the printer (``reference_perturbed_...``) names nothing for sure and is left out. A rule with
fewer than two value rows after it is no table of metrics (a banner's frame). Beside the table's step
row (the first named as a step, ``total_timesteps``, ``steps``; else the first that counts steps) the rows
that count the run otherwise (``episodes``, ``iterations``, ``n_updates``, ``time_elapsed``: the metrics
tables' counters, :mod:`ingest.formats.csv_counters`) are the logger's counters, no metric.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Final

from ingest.formats.aliases import normalise_key
from ingest.formats.csv_counters import is_elapsed_clock, is_run_clock, is_step_like
from ingest.formats.generic_steps import STEP_NAME_SET
from ingest.formats.numbers import NUMBER

_RULE: Final = re.compile(r"^[ \t]*-{8,}[ \t]*$")
_ROW: Final = re.compile(r"^[ \t]*\|(?P<name>[^|]*)\|(?P<value>[^|]*)\|[ \t]*$")
_VALUE: Final = re.compile(r"^" + NUMBER + r"$")
MIN_ROWS: Final = 2
MAX_ROWS: Final = 200
"""Rows a framed table of metrics has at most (a longer run of rows is no one record)."""

Line = tuple[int, str]


def _joined(rows: list[tuple[str, str]]) -> str:
    """``name: value, ...`` of a table's value rows (section headings resolved, names shortened)."""
    section = ""
    named: list[tuple[str, str]] = []
    for name, value in rows:
        if not value:
            section = name.rstrip("/")
            continue
        full = name if "/" in name or not section else f"{section}/{name}"
        named.append((full, value))
    leaf = [full.rsplit("/", 1)[-1] for full, _ in named]
    shared = {x for x in leaf if leaf.count(x) > 1}
    steps = [full for full, short in zip((f for f, _ in named), leaf, strict=True) if _is_step(short)]
    step = steps[0] if steps else next((full for full, _ in named if is_step_like(full)), None)
    return ", ".join(
        f"{full if short in shared else short}: {value}"
        for (full, value), short in zip(named, leaf, strict=True)
        if not full.endswith("...")
        and _VALUE.match(value)
        and not (step is not None and full != step and (_counts(full) or _counts(short)))
    )


def _is_step(name: str) -> bool:
    return normalise_key(name) in STEP_NAME_SET


def _counts(name: str) -> bool:
    """Whether ``name`` counts the run (steps, episodes, updates, its seconds so far): no metric."""
    return is_step_like(name) or is_run_clock(name) or is_elapsed_clock(name)


def table_blocks(lines: Iterable[Line]) -> Iterator[tuple[int, str, list[Line]]]:
    """``(line_no, text, consumed lines)`` of each line of ``lines``; a framed table as one record on
    the opening rule's line (its rows and closing rule consumed)."""
    held: list[Line] | None = None  # the rule and rows of a table being read
    for line_no, text in lines:
        if held is None:
            if _RULE.match(text):
                held = [(line_no, text)]
            else:
                yield line_no, text, []
            continue
        row = _ROW.match(text)
        if row is not None and len(held) <= MAX_ROWS:
            held.append((line_no, text))
            continue
        rows = [m for m in (_ROW.match(t) for _, t in held[1:]) if m is not None]
        values = [(m["name"].strip(), m["value"].strip()) for m in rows]
        if _RULE.match(text) and sum(1 for _, v in values if v) >= MIN_ROWS:
            yield held[0][0], _joined(values), [*held[1:], (line_no, text)]
            held = None
            continue
        yield from ((n, t, []) for n, t in held)
        held = [(line_no, text)] if _RULE.match(text) else None
        if held is None:
            yield line_no, text, []
    if held is not None:
        yield from ((n, t, []) for n, t in held)
