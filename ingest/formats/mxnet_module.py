"""The console of MXNet's Module API (``mod.fit`` with ``mx.callback.Speedometer``; the image-classification
and SSD examples' ``fit.py``), behind Python logging's ``INFO:root:`` or any prefix::

    INFO:root:start with arguments Namespace(batch_size=32, lr=0.01, num_examples=20000, ...)
    INFO:root:Epoch[0] Batch [20]\tSpeed: 142.33 samples/sec\taccuracy=0.562500
    INFO:root:Epoch[0] Train-accuracy=0.671875
    INFO:root:Epoch[0] Time cost=140.990
    INFO:root:Saved checkpoint to "models/img_cls-0001.params"
    INFO:root:Epoch[0] Validation-accuracy=0.710788
    INFO:root:Update[3751]: Change learning rate to 1.00000e-03

``Batch [B]`` counts the batches of epoch ``E`` (from 0): the step is the global batch ``E * P + B``, with
``P`` the batches of an epoch, ``num_examples / batch_size`` as the ``Namespace`` states them (a file that
states no epoch size is the generic reader's; a later launch without one takes its largest printed ``B``).
A launch line (``start with arguments``, ``Resume training with``) starts a run. A Speedometer line's
``Speed`` is ``samples_per_s`` and its pairs the training metrics over the batches since the last print
(``Train-Acc`` is ``Acc``: the Speedometer reports training metrics). The epoch's own lines belong to its
last printed batch (``(E + 1) * P`` where it printed none): ``Train-X`` is the epoch's mean (kept as
``Train-X``), ``Validation-X`` the evaluation (``validation_X``), ``Time cost`` the epoch's seconds
(``epoch_time_s``; over ``P`` batches, the epoch's mean ``step_time_s``). The learning rate is the
``Namespace``'s ``lr`` at the first step and each ``Update[N]: Change learning rate to X`` from update
``N``. ``Saved checkpoint`` is a checkpoint event at the epoch's end.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ingest.formats._common import LogBuilder, iter_whole_lines
from ingest.formats.aliases import canonical_name
from ingest.formats.base import Reader
from ingest.formats.metric_columns import MetricColumns
from ingest.formats.numbers import NUMBER, parse_number
from ingest.formats.raw_text import decode_head, looks_binary

_SPEEDOMETER: Final = re.compile(
    r"\bEpoch\[(?P<epoch>[0-9]+)\][ \t]+Batch[ \t]*\[(?P<batch>[0-9]+)\][ \t]+Speed:[ \t]*(?P<speed>"
    + NUMBER
    + r")[ \t]+samples/sec(?P<rest>.*)$"
)
_EPOCH_END: Final = re.compile(
    r"\bEpoch\[(?P<epoch>[0-9]+)\][ \t]+(?P<key>Train-[^=\s]+|Validation-[^=\s]+|Time cost)=(?P<val>\S+)[ \t]*$"
)
_LR_CHANGE: Final = re.compile(r"\bUpdate\[(?P<update>[0-9]+)\]:[ \t]*Change learning rate to[ \t]+(?P<lr>\S+)")
_SAVED: Final = re.compile(r"\bSaved checkpoint to\b")
_PAIR: Final = re.compile(r"(?P<key>[A-Za-z_][\w-]*)=(?P<val>" + NUMBER + r")(?=[ \t,]|$)")
_NAMESPACE: Final = re.compile(r"\bNamespace\((?P<args>.*)\)")
_LAUNCH: Final = re.compile(r"(?i:\b(?:start|resume)[a-z]*[ \t]+training\b|\bstart with arguments\b)")
"""A launch's first line (``Resume training with (gpu(0)) from epoch 145``, ``Start training with ...``,
``start with arguments Namespace(...)``): a file appended to by several launches holds one run each."""
_ARG: Final = re.compile(r"\b(?P<key>batch_size|num_examples|lr)=(?P<val>" + NUMBER + r")(?=[,)]|$)")


class MxnetModuleReader(Reader):
    name = "mxnet_module"
    description = (
        "MXNet Module fit() console: 'Epoch[E] Batch [B]  Speed: x samples/sec  accuracy=x', 'Epoch[E] Time cost=x'"
    )

    def sniff(self, head: bytes, path: Path) -> float:
        if path.is_dir() or not head or looks_binary(head):
            return 0.0
        lines = decode_head(head).splitlines()
        speed = sum(1 for line in lines if _SPEEDOMETER.search(line))
        ends = sum(1 for line in lines if _EPOCH_END.search(line))
        # the global batch needs the epoch's batch count, which no Speedometer line prints: a file whose
        # Namespace does not state it is left to the generic reader (its step a grid's estimate)
        return 0.0 if not (speed and ends and _stated_period(lines)) else 0.95 if speed >= 2 else 0.8

    def fill(self, paths: Sequence[Path], builder: LogBuilder) -> None:
        periods = iter(_batches_per_epoch(paths))
        per_epoch = next(periods)
        last_batch: dict[int, int] = {}
        rows = MetricColumns()
        put = rows.put

        stated_lr: float | None = None
        for path in paths:
            builder.source(path)
            line_no = 1
            for chunk in iter_whole_lines(path, builder):
                lines = chunk.decode("utf-8", "replace").split("\n")[:-1]
                builder.mark_lines(line_no)
                base = builder.reserve(len(lines))
                for i, line in enumerate(lines):
                    text = line.rstrip("\r")
                    parsed, reason = False, None
                    if _LAUNCH.search(text):
                        per_epoch, last_batch = next(periods, per_epoch), {}
                        builder.run_headings.append(base + i)
                    if m := _SPEEDOMETER.search(text):
                        step = int(m["epoch"]) * per_epoch + int(m["batch"])
                        last_batch[int(m["epoch"])] = step
                        put("samples_per_s", step, float(m["speed"]), base + i)
                        if stated_lr is not None:  # the stated rate holds from the first step on
                            put("lr", step, stated_lr, base + i)
                            stated_lr = None
                        for pair in _PAIR.finditer(m["rest"]):
                            value = parse_number(pair["val"])
                            if value is not None:
                                put(canonical_name(_train_metric(pair["key"]))[0], step, value, base + i)
                        parsed = True
                    elif m := _EPOCH_END.search(text):
                        value = parse_number(m["val"])
                        step = last_batch.get(int(m["epoch"]), (int(m["epoch"]) + 1) * per_epoch)
                        found = _epoch_values(m["key"], value, per_epoch)
                        for metric, v in found.items():
                            put(metric, step, v, base + i)
                        parsed = bool(found)
                    elif m := _LR_CHANGE.search(text):
                        if (lr := parse_number(m["lr"])) is not None:
                            put("lr", int(m["update"]), lr, base + i)
                            parsed = True
                    elif _SAVED.search(text):
                        if ends := rows.steps_of("epoch_time_s"):
                            builder.event(ends[-1], "checkpoint", "model saved")
                        reason = "checkpoint line"
                    elif m := _NAMESPACE.search(text):
                        args = {a["key"]: float(a["val"]) for a in _ARG.finditer(m["args"])}
                        stated_lr = args.get("lr")
                        reason = "config line"
                    elif _LAUNCH.search(text):
                        reason = "banner"
                    if not parsed and reason is None and text.strip():
                        builder.skip(path, line_no, f"not an MXNet Module line: {text.strip()[-80:]}")
                    builder.account.text_line(str(path), line_no, line, parsed=parsed, reason=reason)
                    line_no += 1
        rows.add_to(builder)


def _train_metric(key: str) -> str:
    """A Speedometer pair's metric: its ``Train-`` prefix dropped (the Speedometer reports training metrics)."""
    return key[len("Train-") :] if key.startswith("Train-") else key


def _epoch_values(key: str, value: float | None, per_epoch: int) -> dict[str, float]:
    """The metrics of an epoch's own line: ``Time cost`` as ``epoch_time_s`` and the epoch's mean
    ``step_time_s`` (s over its ``per_epoch`` batches); ``Validation-X`` as ``validation_X``; ``Train-X``
    kept as printed."""
    if value is None:
        return {}
    if key == "Time cost":
        return {"epoch_time_s": value, "step_time_s": value / per_epoch}
    if key.startswith("Validation-"):
        return {"validation_" + key[len("Validation-") :]: value}
    return {key: value}


def _batches_per_epoch(paths: Sequence[Path]) -> list[int]:
    """``P`` of each launch in file order (the lines before the first launch line first):
    ``ceil(num_examples / batch_size)`` where its ``Namespace`` states both, else the largest batch its
    Speedometer lines print (at least 1)."""
    periods: list[int] = []
    stated, largest = None, 1
    for path in paths:
        with path.open("rb") as fh:
            for raw in fh:
                line = raw.decode("utf-8", "replace")
                if _LAUNCH.search(line):
                    periods.append(stated or largest)
                    stated, largest = None, 1
                if (period := _stated_period([line])) is not None:
                    stated = period
                elif (s := _SPEEDOMETER.search(line)) is not None:
                    largest = max(largest, int(s["batch"]))
    periods.append(stated or largest)
    return periods


def _stated_period(lines: Sequence[str]) -> int | None:
    """``ceil(num_examples / batch_size)`` of the first ``Namespace(...)`` of ``lines`` that states both."""
    for line in lines:
        if (m := _NAMESPACE.search(line)) is not None:
            args = {a["key"]: float(a["val"]) for a in _ARG.finditer(m["args"])}
            if args.get("num_examples") and args.get("batch_size"):
                return max(1, math.ceil(args["num_examples"] / args["batch_size"]))
    return None
