"""Which of a record's step counters is the step axis when one restarts (issue #31; docs/diagnosis.md, round 23 f29b).

A trainer that logs two step-like counters on every record (``{"global_step": 30031, "epoch": 1, "step": 31}``)
counts the optimizer steps of the whole run in one and the steps within the epoch in the other. The name order of
:data:`ingest.formats._tabular.STEP_COLUMNS` (``step`` before ``global_step``) picks the per-epoch one, and each
epoch's records then land on the steps of the first epoch: the later epochs' values overwrite the earlier ones, the run
seems to roll back at each epoch and to end at the first epoch's last step.

The rule: **when the chosen counter goes back somewhere while another step counter on the same records never goes
back and rises, the one that keeps rising is the step axis.** A counter that restarts with every other counter (a
relaunch appended to the file, a resume from a checkpoint) changes nothing: no counter keeps rising there, and the
runs are cut as before (:mod:`ingest.formats.table_runs`). The choice is said in ``meta['step_source']``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from ingest.formats._tabular import to_float


def _goes_back(values: np.ndarray) -> bool:
    return bool(np.any(np.diff(values) < 0))


def monotone_step(table: pa.Table, step_col: str, candidates: Sequence[str]) -> tuple[str, str | None]:
    """``(the step column, why it replaced step_col or None)`` for one table of records: ``step_col`` unless it
    goes back while another of ``candidates`` present on every record that carries ``step_col`` never goes
    back and rises (the first such, in ``candidates`` order)."""
    steps, has_step = to_float(table[step_col])
    rows = has_step & np.isfinite(steps)
    if rows.sum() < 2 or not _goes_back(steps[rows]):
        return step_col, None
    for other in candidates:
        if other == step_col or other not in table.column_names:
            continue
        values, present = to_float(table[other])
        if not np.all(present[rows] & np.isfinite(values[rows])):
            continue
        kept = values[rows]
        if _goes_back(kept) or not kept[-1] > kept[0]:
            continue
        back = int(np.flatnonzero(np.diff(steps[rows]) < 0)[0])
        was, now = steps[rows][back], steps[rows][back + 1]
        why = (
            f"the {other!r} field: {step_col!r} restarts ({now:g} after {was:g}) while {other!r} keeps rising "
            f"({kept[0]:g}..{kept[-1]:g}), so {other!r} counts the run's steps and {step_col!r} those of a part of it"
        )
        return other, why
    return step_col, None
