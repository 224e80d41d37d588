"""The lines of a text log as the generic reader takes them (:mod:`ingest.formats.generic`): a record
printed over several lines is one line, and a few ways of printing a value are rewritten as
``key: number`` before its pairs are read.

- ``Epoch [E/N]`` is the epoch ``E`` (read as ``Epoch E``; ``N`` is the planned count).
- A bare ``N/TOTAL`` opening a line of words is its step (read as ``step N/TOTAL``).
- A value printed as a one-item list (``LR: [0.001]``, a scheduler's ``get_last_lr()``) is the item;
  a learning rate's list of one value per parameter group (``lr=[5e-05, 5e-05]``) is its first
  (:mod:`ingest.formats.group_values`).
- A framed table of ``| name | value |`` rows between dashed rules is one record
  (:mod:`ingest.formats.table_blocks`).
- A comma-separated record whose key and value are two items (``epoch 1, phase train, step 10,
  loss_train, 0.838``) reads ``loss_train, 0.838`` as ``loss_train: 0.838``: a one-word key between
  commas with a bare number after it.
- A step line and the counter-less lines that follow it in the same cycle at every step are one
  record (:mod:`ingest.formats.cycle_records`).
- A line holding only a named step counter (``Step: 2000``) followed by lines of one ``key: number``
  each (``Loss: 0.0858``) is one record: the step's values stand on the lines below it, up to a line
  with no pair, another pair count or another step.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final

from ingest.formats._common import LogBuilder, iter_whole_lines
from ingest.formats.cycle_records import Cycle, cycled, find_cycle
from ingest.formats.field_records import expand, meter_epoch, spelled_norms
from ingest.formats.generic_lines import lead_duration, spelled_columns
from ingest.formats.group_values import group_values
from ingest.formats.is_pairs import spelled_is
from ingest.formats.numbers import NUMBER
from ingest.formats.table_blocks import table_blocks

EPOCH_OF_N: Final = re.compile(r"\b((?i:epoch))[ \t]*:?[ \t]*\[[ \t]*([0-9]+)[ \t]*(?:/[ \t]*[0-9]+[ \t]*)?\]")
COMMA_PAIR: Final = re.compile(
    r"((?:^|,)[ \t]*[A-Za-z_][A-Za-z0-9_]*[A-Za-z0-9_/]?)[ \t]*,[ \t]*(" + NUMBER + r")[ \t]*(?=,|$)"
)
"""``, loss_train, 0.838``: a one-word key and its value as two comma-separated items."""
COUNTER_IN_BRACKETS: Final = re.compile(
    r"\b((?i:epoch|batch|iter|iteration|step))[ \t]*:?[ \t]*\[[ \t]*([0-9]+(?:[ \t]*/[ \t]*[0-9]+)?)[ \t]*\]"
)
"""MXNet's Speedometer ``Epoch[0] Batch [19]``: a counter word whose value stands in brackets; a
``Step [S/N]`` beside ``Epoch [E/M]`` counts the steps of an epoch out of ``N`` (read as ``Step S/N``).
A colon may stand before the bracket (HRNet-style ``Epoch: [0/520] Iter:[10/247]``)."""
EPOCH_THEN_STEP: Final = re.compile(
    r"(\b(?i:epoch)[ \t]*:?[ \t]*\[[ \t]*[0-9]+[ \t]*/[ \t]*[0-9]+[ \t]*\])[ \t]*"
    r"\([ \t]*([0-9]+[ \t]*/[ \t]*[0-9]+)[ \t]*\)"
    r"|(\b(?i:epoch)[ \t]*:?[ \t]*\[[ \t]*[0-9]+[ \t]*\])[ \t]*"
    r"\[[ \t]*([0-9]+[ \t]*/[ \t]*[0-9]+)[ \t]*\]"
)
"""MiniMind's ``Epoch:[1/3](100/39695)``: the ``(S/N)`` right after an epoch's ``[E/M]`` counts the
steps of that epoch out of ``N`` (read as ``Step [S/N]``, as beside ``Epoch [E/M]``; docs/diagnosis.md, "Import: steps,
epochs and runs").
So does a bracketed ``[S/N]`` right after an epoch's ``[E]``: the ``MetricLogger`` of torchvision's
references and the DETR, DeiT, MAE family, ``Epoch: [3]  [ 40/139]  eta: ...  loss: ...`` (round 22: f28b)."""


def _epoch_then_step(m: re.Match[str]) -> str:
    """An ``EPOCH_THEN_STEP`` match as the epoch then ``Step [S/N]``."""
    epoch, step = (m[1], m[2]) if m[1] is not None else (m[3], m[4])
    return f"{epoch} Step [{step}]"


ONE_ITEM: Final = re.compile(r"(:[ \t]*)\[(" + NUMBER + r")\](?![\[,])")
SHORT_LINE: Final = 100
"""Characters a line of a split record may have (a lone ``Step: N`` or ``Loss: x``): longer lines are
never joined, and never read twice."""
MAX_JOINED: Final = 12
"""Value lines a split record may hold."""

Pairs = list[tuple[str, float, str | None]]
__all__ = ["Cycle", "find_cycle", "joined", "numbered_lines", "rewrite"]


LOGURU_LOCATION: Final = re.compile(
    r"\|[ \t]*(?!(?i:epoch|iter|iteration|step|batch|it)[ \t]*:)[A-Za-z_<][A-Za-z0-9_.<>]*"
    r"(?::[0-9]+[ \t]*\||(?::[A-Za-z_<][A-Za-z0-9_.<>]*)+:[0-9]+[ \t]+-[ \t])"
)
"""loguru's ``| function:line |`` between its level and message, or its default format's
``| module:function:line - message`` (``| __main__:_log_metrics:8 - iter=0000 ...``; docs/diagnosis.md, "Import: readers
and prefixes"): no pair. A step counter's name there is a column of pairs (``epoch:0 || iter:10 || Loss:19.45``), never
a location."""
SPLIT_LABEL: Final = re.compile(
    r"\b((?i:epoch)[ \t]+[0-9]+)(?:[ \t]*/[ \t]*[0-9]+)?[ \t]+"
    r"(?P<split>(?i:train|training|val|valid|validation|eval|test))[ \t]*(?:-|:|\|)[ \t]*"
)
"""``EPOCH E TRAIN - Loss: x, Acc: y``: the split word labels every key after it."""
LEAD_COUNTER: Final = re.compile(r"^([ \t]*)\[?([0-9]+[ \t]*/[ \t]*[0-9]+)\]?(?=[ \t]+[(A-Za-z])")
"""A line that opens with a bare ``N/TOTAL`` before its words (``1920/191900 (epoch 1) loss: 8.2``) counts
steps out of a total: read as ``step N/TOTAL`` (a Keras bar's ``60/60 [===`` is followed by no word); so
does a bracketed one (``[000500/50000] DATASET | loss 0.05``)."""
_KEY_COLON: Final = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z][A-Za-z0-9_]*)(?=[ \t]*:)")


def rewrite(text: str) -> str:
    """``text`` with ``Epoch [E/N]``, ``Epoch [E]`` (a README's ``Epoch [3], train_loss: ...``) and
    ``Epoch[E]`` / ``Batch [B]`` (MXNet's Speedometer) as ``Epoch E`` / ``Batch B``, one-item lists as
    their item, a loguru location removed, a heading duration as a ``time`` pair
    (:func:`~ingest.formats.generic_lines.lead_duration`), ``|`` columns of several words as one key
    each (:mod:`ingest.formats.generic_lines`), a split label (``EPOCH 3 VAL - Loss: x``) put before
    each key it labels, and a `` : `` field record's abbreviated names spelled out
    (:mod:`ingest.formats.field_records`)."""
    text = lead_duration(meter_epoch(spelled_norms(expand(spelled_is(text)))))
    if "," in text:
        text = COMMA_PAIR.sub(r"\g<1>: \g<2>", text)
    text = LEAD_COUNTER.sub(r"\g<1>step \g<2>", text, count=1)
    if "|" in text:
        text = spelled_columns(LOGURU_LOCATION.sub("| ", text))
    label = SPLIT_LABEL.search(text)
    if label is not None:
        rest = _KEY_COLON.sub(lambda m: f"{label['split']} {m[1]}", text[label.end() :])
        text = f"{text[: label.start()]}{label[1]}, {rest}"
    if "[" not in text:
        return text
    text = group_values(EPOCH_THEN_STEP.sub(_epoch_then_step, text))  # a LR per parameter group: the first's
    text = COUNTER_IN_BRACKETS.sub(r"\g<1> \g<2> ", EPOCH_OF_N.sub(r"\g<1> \g<2> ", text))
    return ONE_ITEM.sub(r"\g<1>\g<2>", text)


def joined(
    lines: Iterable[tuple[int, str]],
    pairs_of: Callable[[str], Pairs],
    is_step: Callable[[str], bool],
    cycle: Cycle | None = None,
) -> Iterator[tuple[int, str, list[tuple[int, str]]]]:
    """``(line_no, text, joined lines)`` of each line, a split record's lines as one (the step line's
    number and text, its value lines' text after it; those lines, numbered, in the list); with a
    ``cycle``, each block of lines in that cycle as one record (:mod:`ingest.formats.cycle_records`)."""
    held: tuple[int, str, list[tuple[int, str]]] | None = None
    for line_no, text, table in table_blocks(lines) if cycle is None else cycled(lines, cycle, pairs_of):
        if table:  # a framed table of rows: one record already (ingest.formats.table_blocks)
            if held is not None:
                yield held
                held = None
            yield line_no, text, table
            continue
        one = pairs_of(text) if len(text) <= SHORT_LINE else None
        if held is not None:
            if one is not None and len(one) == 1 and not is_step(one[0][0]) and len(held[2]) < MAX_JOINED:
                held = (held[0], f"{held[1]}, {text.strip()}", [*held[2], (line_no, text)])
                continue
            yield held
            held = None
        if one is not None and len(one) == 1 and is_step(one[0][0]):
            held = (line_no, text, [])
            continue
        yield line_no, text, []
    if held is not None:
        yield held


def numbered_lines(path: Path, builder: LogBuilder) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each whole line of ``path``, from 1."""
    line_no = 0
    for chunk in iter_whole_lines(path, builder):
        for line in chunk.decode("utf-8", "replace").split("\n")[:-1]:
            line_no += 1
            yield line_no, line
