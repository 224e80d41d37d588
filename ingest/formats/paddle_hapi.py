"""The console of PaddlePaddle's high-level API (``paddle.Model.fit``, ``ProgBarLogger``)::

    The loss value printed in the log is the current step, and the metric is the average value of previous steps.
    Epoch 1/10
    step  10/614 - loss: 0.1637 - acc: 0.5384 - 3s/step
    step 614/614 - loss: 0.1481 - acc: 0.7418 - 3s/step
    save checkpoint at /home/aistudio/save/0
    Eval begin...
    step 88/88 - loss: 0.1469 - acc: 0.7711 - 1s/step
    Eval samples: 11219
    Epoch 2/10

A ``step s/T`` line counts the batches of its epoch (``T`` of them, printed on every line; ``verbose=1``
draws a ``[====>...]`` bar and an ``ETA: 1:02`` after it): the global step is ``(E - 1) * T + s`` for
the ``Epoch E/N`` above it, and ``N * T`` the planned steps. Every `` - key: value`` is a metric by the
alias table; the trailing ``3s/step`` (or ``120ms/step``) is ``step_time_s``. The lines after ``Eval
begin...`` evaluate the model at the end of the epoch (``/88``: the evaluation's own batches, no training
step): the last of them (its metrics are averages over the batches so far) is stored as ``val_``
metrics at the epoch's last training step. ``save checkpoint at`` is a checkpoint event. Redraws
(``\\r``) before the last one of a line are not lines of their own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from ingest.formats._common import LogBuilder, iter_whole_lines
from ingest.formats.aliases import canonical_name
from ingest.formats.base import Reader
from ingest.formats.metric_columns import MetricColumns
from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.raw_text import decode_head, looks_binary

_EPOCH: Final = re.compile(r"^[ \t]*Epoch[ \t]+(?P<epoch>[0-9]+)/(?P<total>[0-9]+)[ \t]*$")
_STEP: Final = re.compile(
    r"^[ \t]*step[ \t]+(?P<cur>[0-9]+)/(?P<tot>[0-9]+)(?:[ \t]+\[[=>.]*\])?"
    r"(?P<rest>(?:[ \t]+-[ \t]+[A-Za-z_][A-Za-z0-9_]*:[ \t]*\S+(?:[ \t]+\S+)??)+)"
    r"(?:[ \t]+-[ \t]+(?P<per>" + NUMBER + r")(?P<unit>[mu]?s)/step)?[ \t]*$"
)
_PAIR: Final = re.compile(r"-[ \t]+(?P<key>[A-Za-z_][A-Za-z0-9_]*):[ \t]*\[?(?P<val>" + NUMBER + r")\]?(?=[ \t]|$)")
_EVAL_BEGIN: Final = re.compile(r"^[ \t]*Eval begin\.\.\.[ \t]*$")
_EVAL_END: Final = re.compile(r"^[ \t]*Eval samples:[ \t]*[0-9]+[ \t]*$")
_SAVE: Final = re.compile(r"^[ \t]*save checkpoint at[ \t]+\S")
_HEADER: Final = re.compile(r"^[ \t]*The loss value printed in the log is the current step")
_NOT_METRICS: Final = frozenset({"ETA", "eta"})
_SECONDS: Final = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


class PaddleHapiReader(Reader):
    name = "paddle_hapi"
    description = "PaddlePaddle hapi Model.fit console: 'Epoch E/N' then 'step s/T - loss: x - acc: x - 3s/step'"

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        lines = [_last_draw(line) for line in decode_head(head).splitlines()]
        epochs = sum(1 for line in lines if _EPOCH.match(line))
        steps = sum(1 for line in lines if _STEP.match(line))
        return 0.0 if not (epochs and steps) else 0.95 if steps >= 2 else 0.8

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        rows = MetricColumns()
        put = rows.put

        for path in paths:
            builder.source(path)
            line_no, in_eval = 1, False
            epoch: int | None = None
            n_epochs: int | None = None
            per_epoch: int | None = None
            last_eval: tuple[dict[str, float], int] | None = None
            for chunk in iter_whole_lines(path, builder):
                lines = chunk.decode("utf-8", "replace").split("\n")[:-1]
                builder.mark_lines(line_no)
                base = builder.reserve(len(lines))
                for i, line in enumerate(lines):
                    own = _last_draw(line)
                    found: dict[str, float] = {}
                    reason: str | None = None
                    if m := _EPOCH.match(own):
                        _flush_eval(last_eval, epoch, per_epoch, put)
                        last_eval = None
                        epoch, n_epochs, in_eval = int(m["epoch"]), int(m["total"]), False
                        reason = "format line without values"
                    elif _EVAL_BEGIN.match(own):
                        in_eval, reason = True, "format line without values"
                    elif _EVAL_END.match(own):
                        _flush_eval(last_eval, epoch, per_epoch, put)
                        last_eval, in_eval, reason = None, False, "format line without values"
                    elif _SAVE.match(own):
                        if epoch is not None and per_epoch is not None:
                            builder.event(epoch * per_epoch, "checkpoint", "model saved")
                        reason = "checkpoint line"
                    elif _HEADER.match(own):
                        reason = "format line without values"
                    elif (m := _STEP.match(own)) and epoch is not None:
                        found = _values(m)
                        if in_eval:
                            last_eval = (found, base + i) if found else last_eval
                        else:
                            per_epoch = int(m["tot"])
                            if n_epochs is not None:
                                builder.meta["total_steps"] = n_epochs * per_epoch
                            step = (epoch - 1) * per_epoch + int(m["cur"])
                            for metric, value in found.items():
                                put(metric, step, value, base + i)
                    if not found and reason is None and line.strip():
                        builder.skip(path, line_no, f"not a Paddle hapi line: {line.strip()[-80:]}")
                    builder.account.text_line(str(path), line_no, line, parsed=bool(found), reason=reason)
                    line_no += 1
            _flush_eval(last_eval, epoch, per_epoch, put)
        rows.add_to(builder)


def _values(m: re.Match[str]) -> dict[str, float]:
    """A step line's metrics by the alias table, and its time per step in seconds (``step_time_s``)."""
    found: dict[str, float] = {}
    for pair in _PAIR.finditer(m["rest"]):
        value = parse_number(pair["val"])
        if value is not None and pair["key"] not in _NOT_METRICS:
            found[canonical_name(pair["key"])[0]] = value
    if m["per"] is not None and (per := parse_number(m["per"])) is not None:
        found["step_time_s"] = per * _SECONDS[m["unit"]]
    return found


def _flush_eval(
    last_eval: tuple[dict[str, float], int] | None,
    epoch: int | None,
    per_epoch: int | None,
    put: Callable[[str, int, float, int], None],
) -> None:
    """Store an evaluation's last line as ``val_`` metrics at the epoch's last training step."""
    if last_eval is not None and epoch is not None and per_epoch is not None:
        values, seq = last_eval
        for metric, value in values.items():
            if metric != "step_time_s":  # the evaluation's own speed measures no training step
                put(metric if metric.startswith("val_") else f"val_{metric}", epoch * per_epoch, value, seq)


def _last_draw(line: str) -> str:
    """A line's last redraw (a ``\\r``-separated progress bar), its line end cut."""
    return line.rstrip("\r").split("\r")[-1]
