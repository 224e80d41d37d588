"""The console of Keras' ``model.fit()`` (Keras 1 and 2, ``verbose=1`` or ``2``)::

    Train on 40000 samples, validate on 10000 samples
    Epoch 1/50
    224s - loss: 3.5508 - acc: 0.2966 - val_loss: 1.4529 - val_acc: 0.5808
    Epoch 2/50
    1875/1875 [==============================] - 5s 3ms/step - loss: 0.2900 - accuracy: 0.9100
    1875/1875 ━━━━━━━━━━━━━━━━━━━━ 5s 3ms/step - accuracy: 0.9100 - loss: 0.2900     (Keras 3)
    1875/1875 - 5s - 3ms/step - accuracy: 0.9100 - loss: 0.2900                      (Keras 3, verbose=2)

The step is the epoch of the ``Epoch i/N`` line before the metric line (the console logs once per
epoch); ``N`` is the planned epoch count. The leading ``224s`` is the epoch's wall time, stored as
``step_time_s`` (one step is one epoch here) where no batch time is printed. Where the bar prints a
time per step (``5s 3ms/step``), that is ``step_time_s`` and the epoch's seconds ``epoch_time_s``.
Every ``key: value`` after a `` - `` is a metric, by the alias table (``acc`` stays ``acc``).
Each ``fit()`` call starts its epoch counter at 1 again: a file holding several calls holds segments,
which the builder splits where the epoch goes back to 1. Progress-bar redraws (``\\r``) before the
final one of an epoch are not lines of their own: the last piece of a line is read (Keras 3's colour
codes and backspaces removed). Where the console is no terminal each redraw is a line: a bar short of its
target (``100/1875``) is such a redraw (its time is an ETA), and only the line at the target is the epoch's.
``ModelCheckpoint``'s ``Epoch 10: saving model to ...`` is a checkpoint event at that epoch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np

from ingest.formats._common import LogBuilder, iter_whole_lines
from ingest.formats.aliases import canonical_name
from ingest.formats.base import Reader
from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.raw_text import LAUNCHER_LEAD, decode_head, looks_binary
from ingest.formats.run_settings import stated_settings

_EPOCH: Final = re.compile(r"^[ \t]*Epoch[ \t]+(?P<epoch>[0-9]+)/(?P<total>[0-9]+)[ \t]*$")
_METRICS: Final = re.compile(
    r"^[ \t]*(?:(?P<cur>[0-9]+)/(?P<tot>[0-9]+)[ \t]+(?:\[[=>.]*\][ \t]+-[ \t]+|\u2501*[ \t]+|-[ \t]+))?"
    r"(?P<time>" + NUMBER + r")s"
    r"(?:[ \t]+(?:-[ \t]*)?(?P<per>" + NUMBER + r")(?P<unit>[mu]?s)/(?P<of>step|sample))?"
    r"(?P<rest>(?:[ \t]+-[ \t]+[A-Za-z_][A-Za-z0-9_]*:[ \t]*\S+)+)[ \t]*$"
)
_SAVE: Final = re.compile(r"^[ \t]*Epoch[ \t]+(?P<epoch>[0-9]+):[^\n]*\bsaving model to\b")
"""``ModelCheckpoint``'s ``Epoch 10: saving model to ...`` (or ``val_loss improved ..., saving model to``)."""
_ANSI: Final = re.compile(r"\x1b\[[0-9;]*m|\x08")
"""Keras 3's bold/colour codes around the count, the bar and the time, and the backspaces of a redraw."""
_PAIR: Final = re.compile(r"-[ \t]+(?P<key>[A-Za-z_][A-Za-z0-9_]*):[ \t]*(?P<val>" + NUMBER + r")(?=[ \t]|$)")


class KerasConsoleReader(Reader):
    name = "keras_console"
    description = "Keras fit() console: 'Epoch i/N' then '224s - loss: x - acc: x - val_loss: x'"

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        lines = [_own(line) for line in decode_head(head).splitlines()]
        epochs = sum(1 for line in lines if _EPOCH.match(line))
        metrics = sum(1 for line in lines if _METRICS.match(line))
        return 0.0 if not (epochs and metrics) else 0.95 if metrics >= 2 else 0.8

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        rows: dict[str, tuple[list[int], list[float], list[int]]] = {}
        for path in paths:
            builder.source(path)
            line_no, epoch = 1, None
            for chunk in iter_whole_lines(path, builder):
                lines = chunk.decode("utf-8", "replace").split("\n")[:-1]
                builder.mark_lines(line_no)  # seq -> line: the run's lines, and segments cut by seq
                base = builder.reserve(len(lines))
                # a model summary's parameter count per model fitted: runs of other sizes are no siblings
                builder.stated_settings += [(base + n - 1, key, value) for n, key, value in stated_settings(lines)]
                for i, line in enumerate(lines):
                    own = _own(_ANSI.sub("", line).rstrip("\r").split("\r")[-1])
                    found: dict[str, float] = {}
                    if m := _EPOCH.match(own):
                        epoch = int(m["epoch"])
                        builder.meta.setdefault("total_steps", int(m["total"]))
                    elif (m := _METRICS.match(own)) and epoch is not None and not _redraw(m):
                        found.update(_times(m))
                        for pair in _PAIR.finditer(m["rest"]):
                            value = parse_number(pair["val"])
                            if value is not None:
                                found[canonical_name(pair["key"])[0]] = value
                        for metric, value in found.items():
                            col = rows.setdefault(metric, ([], [], []))
                            col[0].append(epoch)
                            col[1].append(value)
                            col[2].append(base + i)
                    # the `Epoch i/N` header gives the step to the line below it: counted as such
                    header = "format line without values" if _EPOCH.match(own) else None
                    if save := _SAVE.match(own):
                        builder.event(int(save["epoch"]), "checkpoint", "model saved")
                        header = "checkpoint line"
                    if not found and header is None and line.strip():
                        builder.skip(path, line_no, f"not a Keras fit() line: {line.strip()[-80:]}")
                    builder.account.text_line(str(path), line_no, line, parsed=bool(found), reason=header)
                    line_no += 1
        for metric, (steps, values, seq) in rows.items():
            builder.add(
                metric, np.asarray(steps, np.int64), np.asarray(values), seq=np.asarray(seq, np.int64), canonical=True
            )


_SECONDS: Final = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def _times(m: re.Match[str]) -> dict[str, float]:
    """The times of an epoch's line: where the bar prints a time per step (``6s 22ms/step``) that is
    the step time (0.022 s) and the leading seconds are the epoch's (``epoch_time_s``;
    docs/diagnosis.md, "Import: step times and clocks"); else (``224s - loss: ...``, or a time per sample) the epoch's
    seconds are the step time, one step being one epoch on this console."""
    if m["per"] is not None and m["of"] == "step" and (per := parse_number(m["per"])) is not None:
        return {"step_time_s": per * _SECONDS[m["unit"]], "epoch_time_s": float(m["time"])}
    return {"step_time_s": float(m["time"])}


def _redraw(m: re.Match[str]) -> bool:
    """A bar short of its target: a progress redraw on a line of its own (a console that is no
    terminal), its time an ETA and its values running means; the epoch's line is the one at the target."""
    return m["cur"] is not None and int(m["cur"]) < int(m["tot"])


def _own(line: str) -> str:
    """The line behind any launcher prefix (`host: `, `[rankN]:`)."""
    lead = LAUNCHER_LEAD.match(line.encode())
    return line.encode()[lead.end() :].decode("utf-8", "replace") if lead else line
