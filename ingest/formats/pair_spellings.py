"""Pairs a console spells another way than ``key: number``, respelled before the generic reader reads
its pairs (issue #31; docs/diagnosis.md, "Import: the generic reader"). The rules, for any console:

- numbers printed through a library's scalar repr: a trainer that formats its metrics dict with
  ``str()`` prints numpy 2's scalars as ``np.float64(0.41)`` / ``np.int32(16)`` and torch's as
  ``tensor(0.41)`` or ``tensor(0.41, device='cuda:0')``; such a wrapper around one number is that
  number (a tensor's keyword arguments after it are no pairs). A wrapper around anything else (a
  list, a shape) is left as printed;
- a speed in steps named by its key (``interval_steps_per_second: 5.9``, ``steps_per_sec=2.1``,
  ``iters/s: 3``) is the speed ``R steps/sec`` the reader already turns into a time per step, as if
  the unit had been printed after the number; an evaluation's or prediction's own speed
  (``eval_steps_per_second``) is no training step's;
- a line of ``|`` columns (``step 3/100 | loss 2.1 | 412.5 ms | 31.2% bf16 MFU | 1234 tok/s``): the one
  column that is a duration alone, no name, is the time the line's step took (``step_time``), and a
  column that prints its number before its name (``31.2% bf16 MFU``) is that name's pair; a rate column whose
  number carries a thousands or millions letter (``113.4k tok/s``) is the number scaled (round 24 f30b);
- a ``|`` column opened by the epoch that holds more pairs of whole numbers (nanochat's ``| epoch: 1
  pq: 0 rg: 2 |``) states where the data loader stands (the epoch, then its shard and row group):
  counters of the data, never metrics; only the epoch is read (docs/diagnosis.md, "Import: settings and counters").
"""

from __future__ import annotations

import re
from typing import Final

from ingest.formats.numbers import NUMBER

_SCALAR: Final = re.compile(
    r"\b(?:(?:np|numpy)\.(?:float|int|uint)(?:8|16|32|64|128)|tensor)\([ \t]*(?P<val>"
    + NUMBER
    + r")[ \t]*(?:,[ \t]*[A-Za-z_]+=(?:'[^'\n]*'|\"[^\"\n]*\"|<[^>\n]*>|[A-Za-z0-9_.:]+)[ \t]*)*\)"
)
"""``np.float64(x)``, ``numpy.int32(x)``, ``tensor(x)``, ``tensor(x, device='cuda:0', grad_fn=<...>)``."""

_STEP_SPEED: Final = re.compile(
    r"(?<![A-Za-z0-9_/])(?!(?:eval|val|valid|validation|test|predict|prediction)[_/ ])"
    r"(?:[A-Za-z]+[_ ])?(?:steps?|iters?|iterations?|it)(?:_per_|/| per )(?:second|sec|s)\b"
    r"[ \t]*[:=][ \t]*(?P<val>" + NUMBER + r")(?![ \t]*[A-Za-z/%])",
    re.IGNORECASE,
)
"""``interval_steps_per_second: 5.9``, ``steps_per_sec=2.1``, ``iters/s: 3`` (no unit printed after it)."""
_SPEED_HINT: Final = re.compile(r"(?:_per_|/| per )(?:second|sec|s)\b[ \t]*[:=]", re.IGNORECASE)

_LONE_TIME: Final = re.compile(r"^[ \t]*(?P<val>" + NUMBER + r")[ \t]*(?P<unit>ms|s|sec)[ \t]*$")
"""A column that is one duration and nothing else."""
_VALUE_FIRST: Final = re.compile(
    r"^[ \t]*(?P<val>"
    + NUMBER
    + r")[ \t]*(?P<unit>%)?[ \t]+(?P<key>[A-Za-z][A-Za-z0-9_]*(?:[ \t]+[A-Za-z][A-Za-z0-9_]*){0,2})[ \t]*$"
)
"""A column of a number then its name (``31.2% bf16 MFU``, ``12 skipped batches``); its unit is ``%`` or none."""
_SCALED_RATE: Final = re.compile(
    r"^(?P<pad>[ \t]*)(?P<val>[0-9]+(?:\.[0-9]+)?)(?P<mult>[kKM])(?P<rest>[ \t]+[A-Za-z]+/[A-Za-z]+[ \t]*)$"
)
"""A column of a rate whose number carries a thousands or millions letter (``113.4k tok/s``, ``1.2M tok/s``)."""
_MULTIPLIER: Final = {"k": 1e3, "K": 1e3, "M": 1e6}
_EPOCH_POSITION: Final = re.compile(
    r"^(?P<epoch>[ \t]*(?i:epoch)[ \t]*[:=]?[ \t]*[0-9]+)"
    r"(?:[ \t]+[A-Za-z_][A-Za-z0-9_]*[ \t]*[:=][ \t]*[0-9]+)+[ \t]*$"
)
"""A column opened by the epoch whose other pairs are whole numbers (nanochat's ``epoch: 1 pq: 0
rg: 2``): where the data loader stands in the epoch (its shard and row group), no metric."""
_RATE_WORD: Final = re.compile(r"/|\bper\b", re.IGNORECASE)
"""A name that is a rate's unit (``tok/s``): the pair pattern reads it as a rate already."""


def _columns(text: str) -> str:
    columns = text.split("|")
    times = [i for i, c in enumerate(columns) if _LONE_TIME.match(c)]
    out = []
    for i, column in enumerate(columns):
        m = _LONE_TIME.match(column) if len(times) == 1 else None
        if m is not None:
            out.append(f" step_time: {m['val']}{m['unit']} ")
            continue
        r = _SCALED_RATE.match(column)
        if r is not None:  # the letter scales the number: 113.4k tok/s is 113,400 tokens a second
            column = f"{r['pad']}{float(r['val']) * _MULTIPLIER[r['mult']]:.12g}{r['rest']}"
        p = _EPOCH_POSITION.match(column)
        if p is not None:
            out.append(f"{p['epoch']} ")
            continue
        v = _VALUE_FIRST.match(column)
        if v is not None and i > 0 and not _RATE_WORD.search(v["key"]):
            out.append(f" {'_'.join(v['key'].split())}: {v['val']}{v['unit'] or ''} ")
            continue
        out.append(column)
    return "|".join(out)


def respelled(text: str) -> str:
    """``text`` with every numpy or torch scalar repr replaced by its number and every speed in steps
    named by its key spelled as ``R steps/sec``; ``|`` columns of a lone duration or of a number before
    its name as pairs."""
    if "(" in text:
        text = _SCALAR.sub(r"\g<val>", text)
    if _SPEED_HINT.search(text):  # a cheap test first: most lines name no speed in steps
        text = _STEP_SPEED.sub(r"\g<val> steps/sec", text)
    if text.count("|") >= 2:
        text = _columns(text)
    return text
