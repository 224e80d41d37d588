"""LLaMA-Factory ``trainer_log.jsonl``: ``{"current_steps": 5, "total_steps": 8712, "loss": 1.7484,
"eval_loss": null, "learning_rate": 5e-05, "epoch": 0.0, "percentage": 0.06, "elapsed_time": "0:03:29",
"remaining_time": "4 days, 5:06:09"}``.

``null`` means "not logged at this step" (no row); ``elapsed_time`` (``[N days, ]H:MM:SS``) becomes
``elapsed_time_s``; ``total_steps`` goes to ``meta``; ``percentage``/``remaining_time`` are derived
and dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as _pc

from ingest.formats._common import LogBuilder
from ingest.formats._tabular import MAX_STEP, to_float
from ingest.formats.aliases import canonical_name
from ingest.formats.base import Reader
from ingest.formats.jsonl import first_object, read_jsonl
from ingest.formats.planned import note_planned_steps

pc: Any = _pc  # pyarrow-stubs overloads reject valid calls on generic arrays

_DROPPED = {"total_steps", "percentage", "remaining_time", "elapsed_time"}
_UNMEASURED_WHEN_ZERO = ("throughput", "tokens")
"""LLaMA-Factory writes ``throughput`` (tokens/s) and ``total_tokens`` on every line but measures them only
when asked (``include_num_input_tokens_seen``); otherwise they read 0 (``"0.00"``) all run long. A run that
advances has neither zero speed nor zero tokens seen, so all-zero means not measured: no series."""


def duration_seconds(col: Any) -> np.ndarray:
    """Seconds of ``[N day(s), ]H:MM:SS`` strings (NaN where the text does not fit)."""
    parts = pc.extract_regex(
        col.cast(pa.string()), r"^(?:(?P<d>[0-9]+) days?, )?(?P<h>[0-9]+):(?P<m>[0-9]{2}):(?P<s>[0-9]{2}(?:\.[0-9]+)?)$"
    )
    total = np.zeros(len(col))
    for name, factor in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        field = pc.if_else(pc.equal(parts.field(name), ""), "0", parts.field(name))
        total += factor * pc.cast(field, pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
    return total


class LlamaFactoryReader(Reader):
    name = "llamafactory"
    description = "LLaMA-Factory trainer_log.jsonl: current_steps, total_steps, loss, learning_rate, ..."
    directory_files = ("trainer_log.jsonl",)

    def sniff(self, head: bytes, path: Path) -> float:
        obj = first_object(head)
        if obj is None:
            return 0.0
        return 0.95 if "current_steps" in obj and "total_steps" in obj else 0.0

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        read_jsonl(paths, builder, step_candidates=("current_steps",), keymap=_keymap, wall_candidates=())
        _elapsed(paths, builder)
        for name in _UNMEASURED_WHEN_ZERO:
            values = builder.rows_of(name)[1]
            if values.shape[0] > 1 and not values.any():
                builder.drop(name)
                builder.meta.setdefault("placeholders_dropped", []).append(name)
        note_planned_steps(builder.meta)

    # the elapsed time column is text: a second, cheap pass reads it with the total steps


def _keymap(column: str) -> tuple[str, str | None] | None:
    if column in _DROPPED:
        return None
    return canonical_name(column)


def _elapsed(paths: Sequence[Path], builder: LogBuilder) -> None:
    from ingest.formats._tabular import iter_jsonl

    for path in paths:
        for table, _ in iter_jsonl(path, _NullBuilder(builder)):
            if "current_steps" not in table.column_names:
                continue
            steps, has = to_float(table["current_steps"])
            if "total_steps" in table.column_names and "total_steps" not in builder.meta:
                total, has_total = to_float(table["total_steps"])
                has_total &= np.isfinite(total) & (np.abs(total) < MAX_STEP)  # "total_steps": Infinity
                if has_total.any():
                    builder.meta["total_steps"] = int(total[has_total][0])
            if "elapsed_time" in table.column_names and pa.types.is_string(table["elapsed_time"].type):
                secs = duration_seconds(table["elapsed_time"].combine_chunks())
                ok = has & np.isfinite(steps) & (np.abs(steps) < MAX_STEP) & ~np.isnan(secs)
                builder.add("elapsed_time_s", steps[ok].astype(np.int64), secs[ok], canonical=True, stream=1)


class _NullBuilder(LogBuilder):
    """Second pass: no progress reports and no double-counted skipped lines."""

    def __init__(self, parent: LogBuilder) -> None:
        super().__init__([])

    def advance(self, nbytes: int) -> None:
        return
