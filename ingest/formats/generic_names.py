"""Which keys of a generic log's lines name a training metric, and under which stored name (issue #31).

The generic reader (:mod:`ingest.formats.generic`) chooses a log's step key among the lines that hold a
training metric; a key is one when the alias table stores it under a canonical metric that does not count
like a step. A log that prints only its loss terms and no total (a detector's ``RPN_Conf``,
``RCNN_CrossEntropy``, ``RPNL1Loss``) trains on those terms: they count only where too few lines hold a
canonical metric, so a chat transcript's prose saying "loss" never outvotes a log's real metric lines.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Final

from ingest.formats.aliases import TIME_UNITS, canonical_name, normalise_key, sanitise_name
from ingest.formats.generic_steps import BRACKET_KEY
from stab_core.metrics import CANONICAL_METRICS

SAMPLES_PER_S: Final = re.compile(r"^samples?(?:/s|/sec|[ _]per[ _]sec(?:ond)?|_per_s)$", re.IGNORECASE)
SECONDS_KEYS: Final = frozenset({"seconds", "second", "secs", "sec"})

NOT_STEP_METRICS: Final = frozenset({"epoch", "tokens"})
"""Canonical metrics that count like a step: a line carrying only them does not tell the step key."""


@functools.lru_cache(maxsize=4096)
def stored_name(key: str, unit: str | None) -> tuple[str, str | None]:
    """The metric name a key is stored under (as every reader names it) and its unit."""
    name, key_unit = canonical_name(key)
    if unit is None and key_unit is None and normalise_key(key) in SECONDS_KEYS:
        key_unit = "s"  # '| seconds: 1.25 |': the key is the unit
    if unit is None and key_unit is None and name not in CANONICAL_METRICS and (suffixed := unit_suffixed(key)):
        name, key_unit = canonical_name(suffixed[0])[0], suffixed[1]  # 'dt_ms: 7255.5': dt, in milliseconds
    unit = (unit or key_unit or "").split("/")[0] or None  # '9905 ms/iter': milliseconds
    if unit == "%" and _RATE_NAME.search(name):
        return sanitise_name(key.strip()), unit  # 'Training tokens per second (%)': a share, no rate
    if SAMPLES_PER_S.match(key):
        return "samples_per_s", None  # as the Megatron, NeoX and DeepSpeed readers name it
    if unit in TIME_UNITS and name not in CANONICAL_METRICS and not name.endswith("_s"):
        name += "_s"
    return name, unit


_UNIT_SUFFIX: Final = re.compile(r"^(?P<stem>.*?)[_ ](?P<unit>ns|us|ms|s|sec|secs|min)$")
_TIMER_STEMS: Final = frozenset({"dt", "elapsed", "duration"})


def unit_suffixed(key: str) -> tuple[str, str] | None:
    """``(timer, unit)`` for a timer's key that ends in its unit (nanochat's ``dt_ms``, ``elapsed_s``,
    ``iter_time_ms``): a time in that unit, never a metric named after the unit (#31). A timer is
    ``dt``, ``elapsed``, ``duration`` or a name that ends in ``time``; other keys are None."""
    m = _UNIT_SUFFIX.match(key.strip())
    if m is None:
        return None
    stem = normalise_key(m["stem"])
    return (m["stem"], m["unit"]) if stem in _TIMER_STEMS or stem.endswith("time") else None


_RATE_NAME: Final = re.compile(r"(?:_per_s|_tok_s|^throughput)")
"""A speed's canonical name: a value printed in percent is never one (a share of a speed)."""


LOSS_TERM: Final = re.compile(r"(?i)loss|cross_?entropy|smooth_?l1")


Pairs = list[tuple[str, float, str | None]]
"""One line's ``(key, value, unit)`` pairs."""


def telling(records: Sequence[Pairs], is_key: Callable[[str, str | None], bool]) -> list[Pairs]:
    """The records holding a training metric; a line every rank prints alike (its settings dump) once."""
    return list({tuple(p): p for p in records if any(is_key(key, unit) for key, _, unit in p)}.values())


def trains(key: str, unit: str | None) -> bool:
    """Whether ``key`` names a training metric (the alias table knows it; not a step-like count)."""
    if key == BRACKET_KEY:
        return False
    name = stored_name(key, unit)[0]
    return name in CANONICAL_METRICS and name not in NOT_STEP_METRICS


def trains_or_term(key: str, unit: str | None) -> bool:
    """:func:`trains`, or a detector's loss component (``RPN_Conf``, ``RCNN_CrossEntropy``,
    ``RPNL1Loss``): what a log trains on when it prints its loss terms and no total."""
    return trains(key, unit) or LOSS_TERM.search(key) is not None
