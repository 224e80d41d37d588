"""Megatron-LM CI golden values: ``{"lm loss": {"start_step": 1, "end_step": 24000, "step_interval": 5,
"values": {"1": 12.66, "5": 12.64, ...}}, "num-zeros": {...}, "mem-allocated-bytes": {...},
"iteration-time": {...}}`` (older files: ``"values": [..]`` indexed from ``start_step`` every
``step_interval``). ``"nan"`` strings are kept as NaN: they are evidence, not gaps to close, except at
a step where EVERY metric that has the step (two or more) is NaN, a machine measure (``mem-*``,
``iteration-time``) among them: Megatron writes ``"nan"`` for a step it did not record, memory and
timing included, and a step with no value at all is no record (it is counted in the import account as
a placeholder, not stored). A diverged step's ``lm loss`` and ``num-zeros`` are NaN too, so a file
without a machine measure keeps its NaN steps: they are the divergence.
Memory in bytes becomes ``gpu_mem_gb`` / ``gpu_mem_max_gb`` (GiB) at run level (the file does not
say which rank measured it); ``iteration-time`` (s) becomes ``step_time_s``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ingest.errors import StabScopeError
from ingest.formats._common import LogBuilder
from ingest.formats.base import Reader
from ingest.formats.hf_trainer_state import _load
from ingest.formats.numbers import parse_numbers

_SIGNATURE = re.compile(rb'^\s*\{\s*"[^"]+"\s*:\s*\{\s*"start_step"\s*:')


class MegatronGoldenReader(Reader):
    name = "megatron_golden"
    description = "Megatron-LM golden-values JSON: {metric: {start_step, end_step, step_interval, values}}"

    def sniff(self, head: bytes, path: Path) -> float:
        return 0.95 if _SIGNATURE.match(head) else 0.0

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        stream = 0
        for path in paths:
            builder.source(path)
            data = _load(path)
            builder.advance(path.stat().st_size)
            series: list[tuple[str, dict[str, Any], np.ndarray, list[Any], Any]] = []
            for metric, spec in data.items():
                if not isinstance(spec, dict) or "values" not in spec:
                    builder.skip(path, 1, f"{metric!r} has no 'values'")
                    continue
                steps, raw = _steps_values(spec, path, metric)
                series.append((metric, spec, steps, raw, parse_numbers(pa.array([str(v) for v in raw], pa.string()))))
            blank = _placeholder_steps(
                [(s[2], s[4]) for s in series if _MACHINE.match(s[0])], [(s[2], s[4]) for s in series]
            )
            if blank.size:
                builder.skip(path, 1, "placeholder: every metric nan (step not recorded)", int(blank.size))
            for metric, spec, steps, raw, conv in series:
                if blank.size:
                    keep = ~np.isin(steps, blank)
                    steps, raw = steps[keep], [v for v, k in zip(raw, keep, strict=True) if k]
                    conv = parse_numbers(pa.array([str(v) for v in raw], pa.string()))
                if not conv.ok.all():
                    bad = int(np.flatnonzero(~conv.ok)[0])
                    builder.skip(
                        path,
                        1,
                        f"{metric!r}: value {raw[bad]!r} at step {steps[bad]} is not a number",
                        int((~conv.ok).sum()),
                    )
                builder.add(metric, steps[conv.ok], conv.values[conv.ok], stream=stream)
                if isinstance(spec.get("end_step"), int):
                    builder.meta["total_steps"] = max(builder.meta.get("total_steps", 0), spec["end_step"])
                stream += 1


def _steps_values(spec: dict[str, Any], path: Path, metric: str) -> tuple[np.ndarray, list[Any]]:
    values = spec["values"]
    if isinstance(values, dict):
        try:
            pairs = sorted((int(k), v) for k, v in values.items())
        except ValueError as exc:
            raise StabScopeError(f"{metric!r}: step keys must be integers ({exc})", path=str(path), line=1) from exc
        return np.array([p[0] for p in pairs], dtype=np.int64), [p[1] for p in pairs]
    if isinstance(values, list):
        start = int(spec.get("start_step", 1))
        interval = int(spec.get("step_interval", 1)) or 1
        return start + interval * np.arange(len(values), dtype=np.int64), list(values)
    raise StabScopeError(f"{metric!r}: 'values' must be an object or a list", path=str(path), line=1)


_MACHINE = re.compile(r"^(?:mem-|iteration-time$)")
"""Metrics measured for every step that ran, whatever its loss: the machine's memory and time."""


def _placeholder_steps(machine: list[tuple[np.ndarray, Any]], series: list[tuple[np.ndarray, Any]]) -> np.ndarray:
    """Steps at which every metric that has the step (at least two) holds NaN, a ``machine`` metric among
    them: not recorded (a step that ran but diverged still has its memory and time)."""
    if len(series) < 2 or not machine:
        return np.empty(0, dtype=np.int64)
    measured = np.unique(np.concatenate([steps for steps, _ in machine]))
    have: dict[int, int] = {}
    nan: dict[int, int] = {}
    for steps, conv in series:
        isnan = conv.ok & np.isnan(conv.values)
        for step, missing in zip(steps.tolist(), isnan.tolist(), strict=True):
            have[step] = have.get(step, 0) + 1
            nan[step] = nan.get(step, 0) + int(missing)
    blank = np.array(sorted(s for s, n in have.items() if n >= 2 and nan[s] == n), dtype=np.int64)
    return blank[np.isin(blank, measured)]
