"""The roles of a generic JSON record's keys that their names alone do not give (issue #31; docs/diagnosis.md, "Import:
metrics files").

The generic JSON Lines reader keeps every numeric key under its canonical name; a few keys of the
common trainers' records mean something else than the name says:

- ``time`` beside ``data_time`` (detectron2's ``metrics.json``, MMEngine's ``scalars.json``, mmcv),
  or a ``time`` that goes back between records, is the step's duration in seconds, not a clock;
- ``total_loss`` is the loss when no key names the loss itself (detectron2 sums its ``loss_*``
  terms into it), or when the key the alias table reads as the loss is one of the terms it sums
  (``lm_loss`` beside ``depth_reg_loss``, ``distill_loss``: ``run_loss.aggregate_over_term``; docs/diagnosis.md,
  "Import: the loss");
- an ``epoch`` beside a step counter, whole or fractional (completed epochs, or steps over steps per
  epoch as Hugging Face logs it), is the step axis's companion: an axis, not a metric (docs/diagnosis.md, "Import:
  settings and counters": gen20b; the HF trainer-state reader never stored it either); without a step counter an epoch
  that rises by one a record is the step axis (DETR's ``log.txt``, one record an epoch);
- a ``percentage``/``progress`` key is how far the run is through its planned steps, not a metric;
- a cumulative ``elapsed_time`` (or ``wall_s``: a clock named with its unit, docs/diagnosis.md, "Import: step times and
  clocks") in seconds is a wall clock whose increase over the steps between two records is their ``step_time_s``, and
  ``n_parameters`` the model's size:
  neither is a metric; an ``elapsed_time`` that does not rise, on records logged at every step, is
  that step's duration in seconds (``step_time_s``; docs/diagnosis.md, "Import: step times and clocks"): a clock never
  goes down within a run, and a record a step leaves no interval for a duration to span but its own step;
- a token counter printed with an evaluation's values (``eval_num_tokens``) is the run's cumulative
  count of training tokens, not a metric of the eval (``ingest.formats.run_totals``; docs/diagnosis.md, "Import:
  settings and counters").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ingest.formats._tabular import to_float
from ingest.formats.aliases import KeyMap, canonical_name, own_name
from ingest.formats.column_roles import column_keymap, column_name
from ingest.formats.run_loss import aggregate_over_term
from ingest.formats.run_totals import is_eval_counter

_DURATION_PARTNERS = frozenset({"data_time"})
_CLOCK: Final = re.compile(
    r"^(?:(?:elapsed(?:_time)?|time_elapsed)(?:_(?:s|sec|secs|seconds))?"
    r"|(?:wall(?:_?clock)?|wall_time|wallclock_time)_(?:s|sec|secs|seconds))$"
)
"""Keys of a cumulative clock in seconds since the run began (docs/diagnosis.md, "Import: step times and clocks": a
codec trainer's ``wall_s``: the wall-clock seconds, named by the clock and its unit; round 23 f29b: ``wall_time_sec``,
a wall clock with its unit, is one too); a Unix time (:data:`MAX_ELAPSED_S` and above) is the records' wall clock, not
one of these. A bare ``wall_time`` is the records' wall clock (``_tabular.WALL_COLUMNS``), not matched here."""


def _is_clock(name: str) -> bool:
    return _CLOCK.match(name) is not None


_STEPS_TIME: Final = re.compile(r"^(?:steps|iters|iterations|batches)_time(?:_(?:s|sec|secs|seconds))?$")
"""A time named by the steps in the plural (``steps_time``: an EEG JEPA trainer's seconds per logged step): the
time the steps since the record before took, so each step's own duration where the records are one step apart
(:func:`step_duration`; round 26 r26b)."""


MAX_ELAPSED_S = 1e8
"""Seconds below which a rising clock counts from the run's start (three years): a Unix time is above."""
_MODEL_SIZE = frozenset({"n_parameters", "num_parameters", "n_params", "num_params"})
_PROGRESS = frozenset({"percentage", "percent", "progress", "pct_done", "percent_done"})


def _numbers(table: pa.Table, name: str) -> np.ndarray:
    values, present = to_float(table[name])
    kept: np.ndarray = values[present & np.isfinite(values)]
    return kept


def _rises(values: np.ndarray) -> bool:
    return values.size > 1 and bool(np.all(np.diff(values) >= 0))


_TIME_WITH_UNIT: Final = re.compile(r"^time_(?P<unit>ms|us)$")
"""A bare ``time`` named with a sub-second unit (``time_ms``: nanoGPT-style records' ``iter`` beside ``time_ms``)."""


def time_with_unit(table: pa.Table) -> tuple[str, str] | None:
    """``(key, unit)`` of a bare time in milli- or microseconds that does not only rise from record to record: each
    record's step duration, as a bare ``time`` that does not rise is (a running clock rises; round 24 f30b)."""
    for name in table.column_names:
        m = _TIME_WITH_UNIT.match(name)
        if m is not None:
            values = _numbers(table, name)
            if values.size > 1 and not _rises(values):
                return name, m["unit"]
    return None


def time_is_duration(table: pa.Table, wall_col: str | None) -> bool:
    """Whether the table's ``time`` key (found as its wall clock) is each step's duration in seconds."""
    if wall_col != "time":
        return False
    if _DURATION_PARTNERS & set(table.column_names):
        return True
    values = _numbers(table, "time")
    return values.size > 1 and not _rises(values)


def epoch_axis(table: pa.Table) -> str | None:
    """The ``epoch`` key when it is the records' step axis: whole numbers rising by one a record, save where
    the counter goes back down (round 26 r26b, issue #31): a launch appended to the same file (DETR opens its
    ``log.txt`` in append mode) counts its epochs again from its first one, or from the epoch it resumes at.
    The runs are then cut where it goes back (:mod:`ingest.formats.table_runs`, as for a step counter); an
    epoch repeated by the next record (two records an epoch) is no such axis, nor a counter that goes back
    as often as it rises."""
    if "epoch" not in table.column_names or table.num_rows < 2:
        return None
    values, present = to_float(table["epoch"])
    if not present.all() or not np.all(values == np.round(values)):
        return None
    gaps = np.diff(values)
    rises, back = int(np.sum(gaps == 1)), int(np.sum(gaps < 0))
    return "epoch" if rises + back == gaps.size and back < rises else None


def record_keymap(table: pa.Table, *, step_col: str, wall_col: str | None) -> tuple[KeyMap | None, str | None]:
    """``(key mapping, wall clock column)`` for one table of generic JSON records; the mapping is
    None (every key under its canonical name) when no key of the table has one of these roles."""
    names = set(table.column_names)
    duration = time_is_duration(table, wall_col)
    has_loss = any(canonical_name(n)[0] == "loss" for n in names)
    dropped = {n for n in names if n in _MODEL_SIZE or n.lower() in _PROGRESS}
    dropped |= {n for n in names if _is_clock(n) and _rises(_numbers(table, n))}
    dropped |= {n for n in names if is_eval_counter(n)}
    if "epoch" in names and step_col != "epoch" and step_col != "__row_step":
        dropped.add("epoch")

    total_is_loss = "total_loss" in names and not has_loss
    over_term = aggregate_over_term(names - dropped)  # ingest.formats.run_loss: total_loss beside lm_loss
    own_time = None if duration or "step_time_s" in names else step_duration(table, step_col, names - dropped)
    unit_time = None if duration or own_time or "step_time_s" in names else time_with_unit(table)
    if not (duration or total_is_loss or over_term or dropped or own_time or unit_time or column_keymap(names)):
        return None, wall_col

    def keymap(name: str) -> tuple[str, str | None] | None:
        if name in dropped:
            return None
        if duration and name == "time":
            return "step_time_s", None
        if (name == "total_loss" and total_is_loss) or name == over_term:
            return "loss", None
        if over_term is not None and canonical_name(name)[0] == "loss":
            return own_name(name)  # the loss term the aggregate sums (lm_loss) keeps its name
        if name == own_time:
            return "step_time_s", None
        if unit_time is not None and name == unit_time[0]:
            return "step_time_s", unit_time[1]
        return column_name(name)  # ingest.formats.column_roles

    return keymap, (None if duration else wall_col)


def step_duration(table: pa.Table, step_col: str, names: set[str]) -> str | None:
    """The elapsed-time key (seconds; or a time of the steps, :data:`_STEPS_TIME`) that is each record's own step's
    duration: it does not rise from record to record (a clock would) and the records carrying it are one step apart."""
    for name in sorted(n for n in names if _is_clock(n) or _STEPS_TIME.match(n)):
        values, present = to_float(table[name])
        steps, has_step = to_float(table[step_col])
        rows = present & has_step & np.isfinite(values)
        gaps = np.diff(steps[rows])
        if rows.sum() < 2 or _rises(values[rows]) or np.any(values[rows] < 0) or not np.all(gaps[gaps > 0] == 1):
            continue
        return name
    return None


EPOCH_END_STEP = "__epoch_end_step"


def split_epoch_records(table: pa.Table, step_col: str, candidates: Sequence[str]) -> tuple[pa.Table, pa.Table | None]:
    """``(the step-axis records, the epoch-axis records or None)``.

    When the records carry two step keys that agree (MMEngine's ``step`` and ``iter``) and an
    ``epoch``, a record holding only the first and no epoch is on another axis if every value of its
    step is an epoch of the others (MMEngine's validation record, whose ``step`` is the epoch
    number): it is placed at the last logged iteration of that epoch, with only the keys the
    step-axis records never carry (its own ``time``/``data_time`` are validation's, not a step's).
    """
    names = table.column_names
    others = [c for c in candidates if c != step_col and c in names]
    if not others or "epoch" not in names:
        return table, None
    steps, has_step = to_float(table[step_col])
    other, has_other = to_float(table[others[0]])
    epochs, has_epoch = to_float(table["epoch"])
    both = has_step & has_other
    lone = has_step & ~has_other & ~has_epoch
    if not lone.any() or not both.any() or not np.array_equal(steps[both], other[both]):
        return table, None
    last: dict[float, float] = {}
    for epoch, step in zip(epochs[both & has_epoch], steps[both & has_epoch], strict=True):
        last[epoch] = max(last.get(epoch, step), step)
    if np.all(steps[lone] == 0) and 0 not in last:
        return _after_training_record(table, lone, step_col), None
    if not all(s in last for s in steps[lone]):
        return table, None
    on_axis = table.filter(pa.array(~lone))
    own = [c for c in names if c not in (step_col, others[0]) and on_axis[c].null_count == on_axis.num_rows]
    if not own:
        return on_axis, None
    off = table.filter(pa.array(lone)).select(own)
    placed = np.array([last[s] for s in steps[lone]], dtype=np.float64)
    return on_axis, off.append_column(EPOCH_END_STEP, pa.array(placed))


EVALUATED: Final = "__evaluated_after__"
"""A flag column: the record is a validation record placed at the training record's step before it
(:func:`_after_training_record`); :func:`without_eval_runtime` takes it away once the runs are cut."""


def _after_training_record(table: pa.Table, lone: npt.NDArray[np.bool_], step_col: str) -> pa.Table:
    """``table`` with each validation record of an iteration-based loop (``lone``: its ``step`` is 0, the epoch
    such a loop never counts, as MMEngine's ``LoggerHook`` writes it by default) at the step of the training record
    before it in file order (the iteration it evaluated), in its place: a step going back to 0 at every
    evaluation is no restart, and an evaluation stays in the launch it ran in (several launches appended to one
    ``scalars.json``). It is flagged (:data:`EVALUATED`): its own ``time``/``data_time`` are the evaluation's and
    are left out once the runs are cut (kept until then, they tell two evaluations with equal scores apart)."""
    steps, _ = to_float(table[step_col])
    placed = steps.copy()
    before = np.nan
    for i in range(steps.shape[0]):
        if lone[i]:
            placed[i] = before
        elif np.isfinite(steps[i]):
            before = steps[i]
    at = table.column_names.index(step_col)
    table = table.set_column(at, step_col, pa.array(placed, mask=~np.isfinite(placed)))
    return table.append_column(EVALUATED, pa.array(lone))


def without_eval_runtime(part: pa.Table, step_col: str) -> pa.Table:
    """``part`` (its steps in ``step_col``) without the :data:`EVALUATED` flag, the flagged records' keys that the
    training records carry (the evaluation's own ``time``, ``data_time``, ``memory``) left out."""
    if EVALUATED not in part.column_names:
        return part
    flagged = np.asarray(part[EVALUATED].to_pylist(), dtype=bool)
    part = part.drop_columns([EVALUATED])
    if not flagged.any():
        return part
    trained = part.filter(pa.array(~flagged))
    columns = []
    for name in part.column_names:
        column = part[name]
        if trained.num_rows and trained[name].null_count < trained.num_rows and name != step_col:
            column = pc.if_else(pa.array(flagged), pa.nulls(part.num_rows, column.type), column.combine_chunks())
        columns.append(column)
    return pa.table(columns, names=part.column_names)


def with_clock_step_time(table: pa.Table, step_col: str) -> pa.Table:
    """``table`` with a ``step_time_s`` column from a cumulative clock in seconds (Chainer's
    ``elapsed_time``) when no key gives a step's duration: the clock's increase between two records
    over the steps between them, on the later record (the first record has no interval; a clock
    that goes back, a resumed run, gives none there)."""
    names = table.column_names
    clock = next((n for n in names if _is_clock(n)), None)
    if clock is None or "step_time_s" in names or "time" in names or table.num_rows < 2:
        return table
    wall, has_wall = to_float(table[clock])
    steps, has_step = to_float(table[step_col])
    rows = np.flatnonzero(has_wall & has_step & np.isfinite(wall))
    if rows.size < 2 or not _rises(wall[rows]) or wall[rows[0]] >= MAX_ELAPSED_S:
        return table
    d_wall, d_step = np.diff(wall[rows]), np.diff(steps[rows])
    per_step = np.full(table.num_rows, np.nan)
    per_step[rows[1:]] = np.where((d_step > 0) & (d_wall > 0), d_wall / np.where(d_step > 0, d_step, 1), np.nan)
    return table.append_column("step_time_s", pa.array(per_step, mask=~np.isfinite(per_step)))
