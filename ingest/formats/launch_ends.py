"""Where a launch appended to a metrics table ended, by what its records say (issue #31; docs/diagnosis.md, "Import:
steps, epochs and runs").

:mod:`ingest.formats.table_runs` cuts a table into runs where its step goes back to 0 or 1 (or to the
smallest step seen). Two more signs of a fresh launch hold for any table, whatever its first step:

- **A step below the first step its run logged** starts a fresh run. A resume from a checkpoint goes
  back to a step the run passed after its first log (a checkpoint is saved while it trains); a launch
  that logs below where the run began logging counts from its own start (detectron2's 10-iteration
  smoke runs logging iteration 9 after a run that began at 19).
- **A step back off the run's logging grid** starts a fresh run: a resume restores the step counter and
  logs on the grid it logged on before (:func:`off_grid`); a launch counting from another origin does not.
- **A record after its launch's last** starts a fresh run unless it continues the run's step grid. A
  trainer that prints the time it has left (detectron2's and MMEngine's ``eta_seconds``/``eta``) prints 0
  on the last record of a launch that ran to its planned end; the next record that prints the time left
  again is another launch's. It is the same run only when its step is the next one on the finished run's
  logging grid (a resume to a longer schedule: ``299`` then ``319``, every 20); a run of one record has no
  grid to continue. A record without the field (an evaluation written at the last step) ends nothing.
  A record holding only the step counter and the time left ends its launch too, whatever time it had
  left: detectron2 flushes one when a launch stops between two logging periods (interrupted launches
  appended to one ``metrics.json``, each counting from iteration 19 again; issue #31).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ingest.formats._tabular import STEP_COLUMNS, find_column, to_float

TIME_LEFT: Final = ("eta_seconds", "eta", "eta_s", "time_left", "remaining_time")
"""A record's estimate of the time its launch has left, in seconds: 0 on a finished launch's last record."""


def time_left(table: pa.Table) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]] | None:
    """``(finished, says)`` per row: the row ends its launch (the time left is 0, or the row is a
    closing record: :func:`closing_records`), the row prints the time left; None without the field."""
    col = find_column(table.column_names, TIME_LEFT)
    if col is None:
        return None
    values, has = to_float(table[col])
    says = has & np.isfinite(values)
    return says & ((values == 0) | closing_records(table)), says


def closing_records(table: pa.Table) -> npt.NDArray[np.bool_]:
    """Rows that carry the time left and a step counter and nothing else: what detectron2's JSON writer
    flushes when a launch stops between two logging periods (``{"eta_seconds": 146230.1, "iteration":
    193}`` after the record of 192): the launch's last line, whatever time it had left. A record that
    comes after it and does not continue its step grid is another launch's."""
    names = [c for c in table.column_names if c not in TIME_LEFT and c not in STEP_COLUMNS]
    counters = [c for c in table.column_names if c in STEP_COLUMNS]
    if not counters or not names:
        return np.zeros(table.num_rows, dtype=bool)
    bare = np.ones(table.num_rows, dtype=bool)
    for name in names:
        bare &= table[name].is_null().to_numpy(zero_copy_only=False)
    return bare


@dataclass
class LaunchState:
    """What the rules need of the records before a chunk: the current run's first step, the last step
    (NaN: none yet), the run's logging period (NaN: unknown) and whether the last record ended its launch."""

    run_first: float = math.nan
    last: float = math.nan
    period: float = math.nan
    finished: bool = False
    seen: list[float] = field(default_factory=list)
    """The current run's last distinct steps (at most :data:`GRID_MEMORY`): its logging grid."""

    def fresh(self, step: float, says: bool, base_rule: bool) -> bool:
        """Whether a record of ``step`` (``says``: it prints the time left) starts a fresh run;
        ``base_rule``: the table rule's own verdict (a step back to 0 or 1)."""
        if math.isnan(self.last):
            return False
        if base_rule or step < self.run_first or (step < self.last and off_grid(self.seen, step)):
            return True
        return self.finished and says and not (self.period > 0 and step == self.last + self.period)

    def advance(self, step: float, fresh: bool, finished: bool) -> None:
        """Take a record of ``step`` (``fresh``: it starts a run) into the state."""
        if fresh or math.isnan(self.run_first):
            self.run_first, self.period, self.seen = step, math.nan, []
        elif step > self.last:
            self.period = step - self.last
        if not self.seen or step != self.seen[-1]:
            self.seen.append(step)
            del self.seen[:-GRID_MEMORY]
        self.last, self.finished = step, finished

    def rising(self, steps: npt.NDArray[np.float64]) -> None:
        """Take a chunk of records whose ``steps`` never go back and none of which ends its launch."""
        if math.isnan(self.run_first):
            self.run_first = float(steps[0])
        before = np.concatenate([[self.last], steps]) if not math.isnan(self.last) else steps
        if before.shape[0] > 1 and before[-1] > before[-2]:
            self.period = float(before[-1] - before[-2])
        tail = np.unique(steps[-GRID_MEMORY:]).tolist()
        self.seen = (self.seen + [t for t in tail if not self.seen or t > self.seen[-1]])[-GRID_MEMORY:]
        self.last, self.finished = float(steps[-1]), False


GRID_MEMORY: Final = 256
"""Distinct steps of a run remembered for its logging grid (its last ones: enough to see a grid, and cheap to
look at on every step back of a table whose records go back often)."""
MIN_GRID_STEPS: Final = 5
"""Distinct steps a run must have logged before its grid says anything."""
GRID_SHARE: Final = 0.75
"""Share of a run's distinct steps that must lie on one grid (a period and an offset) for it to be the run's."""


def off_grid(seen: Sequence[float], step: float) -> bool:
    """Whether a step back to ``step`` leaves the logging grid of the run whose distinct steps are ``seen``
    (file order): another launch's step, not a resume's. A trainer logs every ``period`` steps of its
    global counter (``step % period == offset``), and a resume from a checkpoint restores the counter and
    logs on the same grid (a checkpoint saved at step 500 with logs every 200 logs 600 next); a launch
    counting from another origin does not (a DreamerV3 relaunch at env step 1080 after a run logged every
    200 to 20200). Said only where one grid holds :data:`GRID_SHARE` of the run's distinct steps (its
    most common rise and the most common offset): a run logged at irregular steps says nothing."""
    if len(seen) < MIN_GRID_STEPS or not float(step).is_integer():
        return False
    steps = np.asarray(seen, dtype=np.float64)
    rises = np.diff(steps)
    rises = rises[rises > 0]
    if rises.shape[0] == 0:
        return False
    values, counts = np.unique(rises, return_counts=True)
    period = float(values[np.argmax(counts)])
    if period < 2 or not period.is_integer():
        return False
    offsets, counts = np.unique(np.mod(steps, period), return_counts=True)
    best = int(np.argmax(counts))
    if counts[best] < GRID_SHARE * steps.shape[0]:
        return False
    return bool(step % period != offsets[best])
