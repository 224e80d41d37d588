"""A step counter that restarts every epoch, made the run's global step: in a CSV with ``epoch`` and
``step`` columns (:class:`EpochSteps`) and on text lines ``Epoch E | Step S/N`` (:func:`epoch_steps`).
The step goes back only where the epoch grows (never within one epoch; an epoch going back starts a relaunch):
it counts batches within the epoch, and the global step is ``(epoch - base) * period + step`` with
``base`` 0 when the epochs count from 0, else 1 (a file that starts at a later epoch keeps its place on
the axis). A counter that never goes back, or goes back within an epoch (a resume), is kept."""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Sequence
from typing import Final, Protocol

import numpy as np
import pyarrow as pa

from ingest.formats._tabular import to_float
from ingest.formats.aliases import normalise_key


class EpochStepLine(Protocol):
    """A text step line: its step, and its epoch and ``N`` where it prints ``Epoch E ... Step S/N``."""

    step: int
    epoch: int | None
    per_epoch: int | None


class EpochSteps:
    """The global step of a table whose step column counts batches within the epoch (it restarts
    when the epoch column grows): ``(epoch - base) * period + step``, with ``period`` the largest
    step before the first restart + 1 (a 0-based counter's batch count; + ``k`` for one logged on a grid
    0, ``k``, ``2k`` .. that stops short of the epoch's end) and ``base`` 0 when the
    epochs count from 0, else 1 (a file that starts at a later epoch keeps its place on the axis).
    A step column that never goes back, or goes back without the epoch growing (a resume), is kept
    as written. Streamed tables share one instance: the period found in the first holds for all."""

    def __init__(self) -> None:
        self.period: int | None = None
        self.base = 1
        self._last: tuple[float, float] | None = None  # (epoch, step) of the previous row

    def global_steps(self, table: pa.Table, step_col: str, epoch_col: str) -> pa.Table:
        steps, has_step = to_float(table[step_col])
        epochs, has_epoch = to_float(table[epoch_col])
        rows = has_step & has_epoch & np.isfinite(steps) & np.isfinite(epochs)
        if not rows.any():
            return table
        s, e = steps[rows], epochs[rows]
        if self.period is None:
            if self._last is not None:
                s_all, e_all = np.concatenate([[self._last[1]], s]), np.concatenate([[self._last[0]], e])
            else:
                s_all, e_all = s, e
            back = np.flatnonzero(np.diff(s_all) < 0)
            whole = bool(np.all(s_all == np.round(s_all)) and np.all(e_all == np.round(e_all)))
            if back.size == 0 or not whole or np.any(np.diff(e_all) < 0) or np.any(np.diff(e_all)[back] <= 0):
                self._last = (float(e[-1]), float(s[-1]))
                return table
            first = s_all[: back[0] + 1]
            # a counter logged on a grid from 0 every k batches (0, 50 .. 950 of 1000) ends its epoch k
            # past its last logged value; any other (299, 599 of 600; 0, 10, 19) logs the epoch's last batch
            k = int(np.median(np.diff(first))) if first.shape[0] > 1 else 1
            grid = first[0] == 0 and k > 1 and bool(np.all(first % k == 0))
            self.period = int(first.max()) + (k if grid else 1)
            self.base = 0 if e_all.min() == 0 else 1
        out = steps.copy()
        out[rows] = (e - self.base) * self.period + s
        column = pa.array(out, pa.float64(), mask=~has_step)
        return table.set_column(table.column_names.index(step_col), step_col, column)


@functools.lru_cache(maxsize=16)
def _of_n_pattern(step_keys: tuple[str, ...]) -> re.Pattern[str]:
    keys = "|".join(re.escape(k) for k in step_keys)
    return re.compile(r"(?<![A-Za-z0-9_])(?:" + keys + r")[ \t]*[:=]?[ \t]*[0-9]+[ \t]*/[ \t]*([0-9]+)\b")


def step_of_n(step_keys: tuple[str, ...], line: str) -> int | None:
    """``N`` of a step printed ``Step S/N`` (None when the step is printed without one)."""
    m = _of_n_pattern(step_keys).search(line)
    return int(m.group(1)) if m and int(m.group(1)) > 0 else None


def epoch_steps(lines: Sequence[EpochStepLine]) -> None:
    """Make a step counter that restarts every epoch a global step, in place: where the lines print
    ``Epoch E ... Step S/N`` and the step goes back where the epoch grows, ``S/N`` counts the epoch's
    ``N`` batches and the step is ``(E - base) * N + S`` (``base`` 0 when the epochs count from 0,
    else 1). A counter that never goes back where the epoch grows is kept (``S/N`` of all steps). A
    file several launches appended to is cut into launches where the epoch goes back, or the step goes
    back within one epoch (a relaunch, or a resume: the segments cut it), and each launch is made
    global on its own with the file's ``base``, so a resumed launch keeps its place on the axis. A line
    of the same epochs that prints its step without ``/N`` (an eval line's ``Epoch 2 | Step 100``) is
    converted too, with the ``N`` its epoch's marked lines print (else the launch's last ``N``), where
    its step is within that ``N``. An epoch's ``N`` is the one its first marked line prints (a logger
    whose denominator wobbles by one within the epoch, ``0020/1263`` .. ``1260/1264``, keeps one
    period per epoch, so the axis never goes back within it)."""
    marked = [x for x in lines if x.epoch is not None and x.per_epoch is not None]
    if len(marked) < 2:
        for launch in _relaunches(lines):
            _unmarked_epoch_steps(launch)
        return
    launches: list[list[EpochStepLine]] = [[]]
    went_back = False
    last: EpochStepLine | None = None
    for x in lines:
        if last is not None and x.epoch is not None and last.epoch is not None:
            if x.epoch < last.epoch or (x.step < last.step and x.epoch == last.epoch):
                launches.append([])
            went_back |= x.step < last.step and x.epoch > last.epoch
        launches[-1].append(x)
        if x.epoch is not None:
            last = x
    if not went_back:
        return
    base = 0 if min(x.epoch for x in marked if x.epoch is not None) == 0 else 1
    for launch in launches:
        _launch_epoch_steps(launch, base)


def fresh_launches(lines: Sequence[EpochStepLine]) -> list[int]:
    """Indices of the lines where a fresh launch starts: the epoch goes back to the lowest epoch seen
    so far (a training relaunched from its first epoch and appended to the same file is another run,
    even where its first logged batch is past the first run's; an epoch going back to a later one is
    a resume, kept in the run)."""
    out: list[int] = []
    last: int | None = None
    lowest: int | None = None
    for i, x in enumerate(lines):
        if x.epoch is None:
            continue
        if last is not None and lowest is not None and x.epoch < last and x.epoch <= lowest:
            out.append(i)
        last, lowest = x.epoch, x.epoch if lowest is None else min(lowest, x.epoch)
    return out


def _relaunches(lines: Sequence[EpochStepLine]) -> list[Sequence[EpochStepLine]]:
    """``lines`` cut where the epoch goes back: each launch appended to the file counts its own."""
    cuts = [0]
    last: int | None = None
    for i, x in enumerate(lines):
        if x.epoch is not None:
            if last is not None and x.epoch < last:
                cuts.append(i)
            last = x.epoch
    cuts.append(len(lines))
    return [lines[a:b] for a, b in itertools.pairwise(cuts)]


def _launch_epoch_steps(lines: Sequence[EpochStepLine], base: int) -> None:
    """One launch's ``(E - base) * N + S`` (see :func:`epoch_steps`)."""
    n_of: dict[int, int] = {}
    for x in lines:
        if x.epoch is not None and x.per_epoch is not None:
            n_of.setdefault(x.epoch, x.per_epoch)
    if not n_of:
        return
    last_n = next(x.per_epoch for x in reversed(lines) if x.epoch is not None and x.per_epoch is not None)
    for x in lines:
        if x.epoch is not None:
            n = n_of.get(x.epoch, last_n)
            if x.per_epoch is None and x.step > n:
                continue  # a step past the epoch's batches is no batch of it: global already
            x.step = (x.epoch - base) * n + x.step


def _unmarked_epoch_steps(lines: Sequence[EpochStepLine]) -> None:
    """``Epoch E, Step S`` without ``/N``: where every line prints its epoch and the step goes back
    only where the epoch grows (the epochs never going back), ``S`` counts the epoch's batches and
    the step is ``(E - base) * N + S``, with ``N`` read from the first epoch the log completes (its
    last ``S`` for a counter logged on a grid ``k, 2k ..`` from ``k`` or for any 1-based one, + ``k``
    for a grid from 0, + 1 for any other 0-based counter), as a table's ``epoch``/``step`` columns are
    (:class:`EpochSteps`). A log that never restarts its step, or restarts it within an epoch, is kept."""
    if len(lines) < 2 or any(x.epoch is None for x in lines):
        return
    first_back = None
    for i, (a, b) in enumerate(itertools.pairwise(lines)):
        assert a.epoch is not None and b.epoch is not None
        if b.epoch < a.epoch or (b.step < a.step and b.epoch == a.epoch):
            return
        if b.step < a.step and first_back is None:
            first_back = i
    if first_back is None:
        return
    first = np.asarray([x.step for x in lines[: first_back + 1] if x.epoch == lines[first_back].epoch])
    k = int(np.median(np.diff(first))) if first.shape[0] > 1 else 1
    on_grid = k > 1 and bool(np.all(first % k == 0))
    top = int(first.max())
    period = top if (on_grid and first[0] == k) or first[0] == 1 else top + (k if on_grid else 1)
    base = 0 if min(x.epoch for x in lines if x.epoch is not None) == 0 else 1
    for x in lines:
        assert x.epoch is not None
        x.step = (x.epoch - base) * period + x.step


Pairs = Sequence[tuple[str, float, str | None]]


def epoch_counted(records: Sequence[Pairs], key: str, values: list[float]) -> list[float]:
    """``key``'s values as a step axis would count them: where every line that prints ``key`` also
    prints its epoch and ``key`` goes back only where the epoch grows or goes back (a batch counter
    restarting each epoch, made global by :func:`epoch_steps`; a relaunch), each value offset by its
    epoch; else ``values``."""
    counted: list[float] = []
    last: tuple[float, float] | None = None
    for pairs in records:
        step = next((v for k, v, u in pairs if k == key and u is None), None)
        if step is None:
            continue
        epoch = next((v for k, v, _ in pairs if normalise_key(k) == "epoch"), None)
        # an epoch going back is a relaunch appended to the file (one restart), counted as such
        if epoch is None or (last is not None and step < last[1] and epoch == last[0]):
            return values
        counted.append(epoch * (1 + max(values)) + step)
        last = (epoch, step)
    restarts = any(b < a for a, b in itertools.pairwise(values))  # a key that never goes back counts by itself
    return counted if len(counted) == len(values) and restarts else values


_BAR_TOTAL: Final = re.compile(r"[0-9]{1,3}%\|[^|\n]*\|[ \t]*[0-9]+/([0-9]+)")


def bar_total(line: str, step: int) -> int | None:
    """The total ``N`` of the last progress bar (``26%|##  | 499/1928 [...]``) a step line is glued to
    (a tqdm bar over the epoch's batches redrawn on the same line), where the step is within it."""
    totals = _BAR_TOTAL.findall(line)
    n = int(totals[-1]) if totals else 0
    return n if 0 < step <= n else None
