"""The step time a tqdm training bar prints (docs/diagnosis.md, "Import: step times and clocks"; issue #31).

A Hugging Face / TRL console draws the training bar at every optimizer step, ``  5%|▍  | 20/405
[07:33<2:26:54, 22.90s/it]``: its count is the global step (the Trainer advances the bar, then logs) and its
rate, tqdm's smoothed time per iteration (``s/it``, or ``it/s`` for fast steps), is the time a step took
around that step. Each count the training bar reaches with a rate gives that step's time (the last draw of
a count wins); the start (``0/405``, ``?it/s``) gives none, and a bar of another total (a data loader's,
an evaluation's) none.
"""

from __future__ import annotations

import re
from typing import Final

import numpy as np

from ingest.formats._common import LogBuilder
from ingest.formats.field_roles import DERIVED_ORIGIN
from ingest.formats.numbers import NUMBER, parse_number

_RATE: Final = re.compile(r"^[^\]\[]*?,[ \t]*(?P<rate>" + NUMBER + r")[ \t]*(?P<unit>s/it|it/s)\b")
"""The rate after a bar's ``[elapsed<left`` (tqdm: ``, 22.90s/it]`` or ``, 1.64it/s]``)."""
STREAM: Final = 2
"""The bars' own step sequence (the logs dicts are stream 0, evaluations 1): a bar drawn after a dict may count
a step below it (dicts dated by their logging interval), which on the dicts' stream would read as a restart."""


def bar_rate(after: str) -> float | None:
    """Seconds per step of the bar whose text after its ``N/T [`` is ``after``; None without a rate."""
    m = _RATE.match(after)
    if m is None:
        return None
    value = parse_number(m["rate"])
    if value is None or not value > 0 or not np.isfinite(value):
        return None
    return value if m["unit"] == "s/it" else 1.0 / value


def bar_step_times(rates: dict[tuple[int, int], float], total: int, builder: LogBuilder) -> None:
    """Store ``step_time_s`` at each count of the training bar (total ``total``) that ``rates`` holds
    (``{(count, total): seconds per step}``)."""
    found = sorted((count, seconds) for (count, of), seconds in rates.items() if of == total and count > 0)
    if not found:
        return
    steps, seconds = zip(*found, strict=True)
    builder.add(
        "step_time_s",
        np.asarray(steps, np.int64),
        np.asarray(seconds),
        stream=STREAM,
        canonical=True,
        origin=DERIVED_ORIGIN,
    )
