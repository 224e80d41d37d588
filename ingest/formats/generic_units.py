"""Units the generic reader (:mod:`ingest.formats.generic`) gives values a log prints without one.

- **A bare ``dt``** (the nanoGPT family's name for one iteration's time: ``step=10 loss=3.2 dt=0.284``)
  is the step time. Trainers print it in seconds or in milliseconds under the same name (wordplay's
  console printed ``dt=108.1093`` in ms in 2024-04 and ``dt=0.28387`` in s in 2024-11). Where the
  metric lines carry a time stamp, the wall clock says which: the median ``dt`` against the wall
  time per step between the first and the last stamped line (evaluations and saves in between
  make the wall time per step longer, never a thousand times). Within a factor of
  :data:`CLOCK_AGREEMENT` of 1 it is seconds, of 1000 milliseconds; without time stamps, or
  agreeing with neither, seconds (the canonical unit: nothing is rescaled on a guess).
- **A unitless ``mfu`` above 1** is a percentage (a model cannot use more than all of the peak
  FLOPs): canonical MFU is a fraction. A negative MFU is no measurement (nanoGPT's running MFU
  prints ``-100`` until it has one) and is dropped by the reader.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

import numpy as np

from ingest.formats.aliases import normalise_key

BARE_STEP_TIME_KEYS: Final = frozenset({"dt"})
"""Keys (normalised) that name one iteration's time without saying its unit."""
CLOCK_AGREEMENT: Final = 3.0
"""How far (a factor either way) ``dt`` and the wall time per step may differ and still agree."""
_STAMP: Final = re.compile(
    r"(?<![0-9])([0-9]{4}-[0-9]{2}-[0-9]{2})[ T]([0-9]{2}:[0-9]{2}:[0-9]{2})(?:[.,]([0-9]{1,9}))?"
)


def line_time(line: str) -> float | None:
    """Seconds since the epoch of the first ``YYYY-MM-DD HH:MM:SS[.fff]`` stamp of ``line`` (read as
    UTC: only differences are used), None without one."""
    m = _STAMP.search(line)
    if m is None:
        return None
    try:
        stamp = datetime.strptime(f"{m[1]} {m[2]}", "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return None
    return stamp.timestamp() + (float("0." + m[3]) if m[3] else 0.0)


def bare_time_unit(dts: Sequence[float], steps: Sequence[float], stamps: Sequence[float | None]) -> str:
    """``"s"`` or ``"ms"`` for a bare ``dt`` printed as ``dts`` on metric lines at ``steps`` stamped
    ``stamps`` (None: the line has none); see the module docstring."""
    timed = [(s, t) for s, t in zip(steps, stamps, strict=True) if t is not None]
    finite = [d for d in dts if math.isfinite(d) and d > 0]
    if len(timed) < 2 or not finite:
        return "s"
    (first_step, first_t), (last_step, last_t) = timed[0], timed[-1]
    if last_step <= first_step or last_t <= first_t:
        return "s"
    wall_per_step = (last_t - first_t) / (last_step - first_step)
    ratio = float(np.median(finite)) / wall_per_step
    if 1 / CLOCK_AGREEMENT <= ratio <= CLOCK_AGREEMENT:
        return "s"
    if 1000 / CLOCK_AGREEMENT <= ratio <= 1000 * CLOCK_AGREEMENT:
        return "ms"
    return "s"


def mfu_unit(values: Sequence[float]) -> str | None:
    """``"%"`` when a unitless MFU is printed as a percentage (a value above 1), else None."""
    return "%" if any(math.isfinite(v) and v > 1.0 for v in values) else None


def is_clock(values: Sequence[float], min_lines: int) -> bool:
    """Whether a time key's values are a clock (seconds since the start: ``| seconds: 301.5 |``), not
    each step's time: they never go down and at least double over ``min_lines`` or more of the log's
    first lines. A step's own time wanders both ways around its level."""
    arr = np.asarray(values, np.float64)
    arr = arr[np.isfinite(arr)]
    if arr.shape[0] < min_lines or arr[0] < 0:
        return False
    if np.all(np.diff(arr) >= 0):
        return bool(arr[-1] >= 2 * arr[0] and arr[-1] > 0)
    return _restarting_clock(arr, min_lines)


def is_countdown(values: Sequence[float], min_lines: int) -> bool:
    """Whether a time key's values count down to zero (a time left: MiniMind's ``epoch_time: 130.0min``
    falling to ``0.0min`` over the epoch; docs/diagnosis.md, "Import: step times and clocks"): over ``min_lines`` or
    more lines they rise on at most :data:`COUNTDOWN_RISES` of them (an estimate revised upwards now and then) and end
    at no more than :data:`COUNTDOWN_END` of their first reading. A step's or an epoch's own time wanders around its
    level and never ends near nothing."""
    arr = np.asarray(values, np.float64)
    arr = arr[np.isfinite(arr)]
    if arr.shape[0] < max(min_lines, 2) or arr[0] <= 0 or np.any(arr < 0):
        return False
    rises = int(np.count_nonzero(np.diff(arr) > 0))
    return rises <= COUNTDOWN_RISES * (arr.shape[0] - 1) and bool(arr[-1] <= COUNTDOWN_END * arr[0])


COUNTDOWN_RISES: Final = 0.1
"""Share of a time left's lines that may read more than the line before."""
COUNTDOWN_END: Final = 0.05
"""A time left's last reading, as a share of its first at most."""


CLOCK_ADVANCES: Final = 0.9
"""Share of a restarting clock's lines (within one stretch) that read later than the line before."""


def _restarting_clock(arr: np.ndarray, min_lines: int) -> bool:
    """A clock that restarts (``Time: 266.5s``, the seconds since the epoch began): it goes down only
    where it starts again, each time to at most half its reading before, and in between it advances on
    nearly every line; at least one stretch doubles. A step time with slow steps among equal ones also
    falls by half after each slow step, but it does not advance between them."""
    d = np.diff(arr)
    drops = np.flatnonzero(d < 0)
    if np.any(arr[drops + 1] > 0.5 * arr[drops]):
        return False
    stretches = np.split(arr, drops + 1)
    if min(s.shape[0] for s in stretches) < min_lines:
        return False
    advancing = sum(int(np.count_nonzero(np.diff(s) > 0)) for s in stretches)
    if advancing < CLOCK_ADVANCES * (arr.shape[0] - len(stretches)):
        return False
    return any(s[-1] >= 2 * s[0] and s[-1] > 0 for s in stretches)


MIN_UNNAMED_LINES: Final = 3
"""Metric lines a step key without a step's name must count on (strictly increasing) to be proposed."""
RUNNING_AVERAGE_SLACK: Final = 0.02
"""Lines whose implied elapsed time may go down (the speed's rounding) in a running average since the start."""


def speed_series(steps: np.ndarray, seconds: np.ndarray, rows: Any, meta: dict[str, Any]) -> str:
    """The name a speed in steps (as seconds per step) is stored under. A speed that is a running
    average since the start (its implied elapsed time, step / speed, never goes down but for the
    speed's rounding) is no step's time: a slow stretch would never leave it. It is kept as
    ``step_time_avg_s`` and its last value, the run's mean time per step, goes to ``meta['step_time_s']``
    (what the cost is priced with). Any other speed (an instantaneous or moving-average one, tqdm's)
    is the step time, ``step_time_s`` (unless the log prints one: then it keeps ``step_time_avg_s``)."""
    elapsed = steps * seconds
    downs = int(np.count_nonzero(np.diff(elapsed) < 0))
    if elapsed.shape[0] >= MIN_UNNAMED_LINES and downs <= RUNNING_AVERAGE_SLACK * elapsed.shape[0]:
        meta["step_time_s"] = float(seconds[np.argmax(steps)])
        meta["step_time_source"] = "the last running-average speed the log prints (steps/sec since the start)"
        return "step_time_avg_s"
    return "step_time_avg_s" if any(name == "step_time_s" for name, _ in rows) else "step_time_s"


LOADER_KEYS: Final = frozenset({"data", "data_time"})
"""A step's data-loading time printed bare beside its whole time (``time: 0.5123  data: 0.0012``)."""
_BARE_TIME_KEYS: Final = frozenset({"time", "iter_time", "batch_time"})


def loader_timed(records: Sequence[Sequence[tuple[str, float, str | None]]]) -> dict[str, str]:
    """``{key: "s"}`` for a bare time key (``time``) that step lines print beside a bare data-loading time
    (``data``), the loader's time no more than the step's on nearly every line: the ``MetricLogger`` of
    torchvision's references and the DETR, DeiT, MAE family prints ``time: 16.21  data: 0.0015``, both
    in seconds per iteration (round 22: f28b). A bare ``time`` alone may be a clock or a time of day:
    it gets no unit here."""
    pairs: dict[str, list[tuple[float, float]]] = {}
    for line in records:
        bare = {normalise_key(k): (k, v) for k, v, u in line if u is None}
        loader = next((bare[k][1] for k in LOADER_KEYS if k in bare), None)
        if loader is None:
            continue
        for name in _BARE_TIME_KEYS & bare.keys():
            key, value = bare[name]
            pairs.setdefault(key, []).append((value, loader))
    out = {}
    for key, seen in pairs.items():
        fits = sum(1 for step, load in seen if math.isfinite(step) and 0 <= load <= step)
        if len(seen) >= MIN_UNNAMED_LINES and fits >= 0.9 * len(seen):
            out[key] = "s"
    return out
